//! This crate's own modules import each other in no circle.

#[test]
fn no_module_cycle() {
    module_cycles::assert_no_cycle(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
}
