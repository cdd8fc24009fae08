//! The check on small crates under `tests/fixtures/`: one whose modules only look
//! down, and one with two circles (one closed from two levels down through `super::`,
//! one closed by a test module), and one whose only circle is between nested siblings.

use std::path::{Path, PathBuf};

use module_cycles::{assert_no_cycle, describe_cycles, module_graph, module_graphs};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name).join("src")
}

#[test]
fn a_crate_that_only_looks_down_passes() {
    let graph = module_graph(&fixture("acyclic")).unwrap();
    assert_eq!(graph.targets("server").collect::<Vec<_>>(), ["render", "snapshot"]);
    assert_eq!(graph.targets("render").collect::<Vec<_>>(), ["snapshot"]);
    assert_eq!(graph.targets("snapshot").count(), 0, "comments, strings and inner supers are no edges");
    assert_no_cycle(fixture("acyclic"));
}

#[test]
fn every_circle_is_named_with_the_lines_that_make_it() {
    let src = fixture("cyclic");
    let report = describe_cycles(&module_graph(&src).unwrap(), &src);
    assert!(report.contains("config -> store -> config"), "{report}");
    assert!(report.contains("config -> store at config.rs:3"), "{report}");
    assert!(report.contains("store -> config at store/flags.rs:2"), "{report}");
    assert!(report.contains("leaf -> web -> leaf"), "{report}");
    assert!(report.contains("leaf -> web at leaf.rs:5"), "{report}");
    assert_eq!(report.matches("module cycle in").count(), 2, "{report}");
}

#[test]
#[should_panic(expected = "config -> store -> config")]
fn the_check_fails_on_a_cyclic_crate() {
    assert_no_cycle(fixture("cyclic"));
}

#[test]
#[should_panic(expected = "reading")]
fn a_missing_source_folder_fails_naming_it() {
    assert_no_cycle(fixture("missing"));
}

#[test]
fn a_circle_between_nested_siblings_is_named_with_its_parent() {
    let src = fixture("nested");
    assert_eq!(module_graph(&src).unwrap().targets("render").collect::<Vec<_>>(), ["snapshot"]);
    let graphs = module_graphs(&src).unwrap();
    let render = &graphs[&vec!["render".to_string()]];
    assert_eq!(render.targets("mig").collect::<Vec<_>>(), ["pods"]);
    let report = describe_cycles(render, &src.join("render"));
    assert!(report.contains("nested/src/render: mig -> pods -> mig"), "{report}");
    assert!(report.contains("mig -> pods at render/mig.rs:3"), "{report}");
    assert!(report.contains("pods -> mig at render/pods.rs:4"), "{report}");
    let panic = std::panic::catch_unwind(|| assert_no_cycle(&src)).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("mig -> pods -> mig"), "{message}");
}
