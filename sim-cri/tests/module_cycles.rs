//! This crate's top-level modules import each other in no circle (see the
//! `module-cycles` crate for what counts as an import).

#[test]
fn no_module_cycle() {
    module_cycles::assert_no_cycle(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
}
