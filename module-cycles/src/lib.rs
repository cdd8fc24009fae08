//! Test support for every crate of the workspace: fails when modules that share a
//! parent import each other in a circle, at the top level and at every nested level.
//!
//! Each crate has a test (`tests/module_cycles.rs`) that calls
//! [`assert_no_cycle`] on its own `src/`. A module is a file `src/x.rs` or a folder
//! `src/x/`, and so on down (`src/x/y.rs` is `x::y`); the crate root (`lib.rs`,
//! `main.rs`) and `src/bin/` are not modules of the graph. Each module with children
//! (and the crate root) has a graph of its children: an edge `y -> z` in `x`'s graph is
//! any path from a file inside `x::y` that names something inside its sibling `x::z`,
//! written as `crate::x::z`, `$crate::x::z`, `super::z` or `self::` ([`scan`] says
//! which forms count), test code included: a test module that reaches back up is still
//! a knot to untie. Code a macro pulls in from another file (`include!`,
//! `tonic::include_proto!`) is not read.
//!
//! Why: data in this project flows one way (NVML -> collection -> snapshot -> render),
//! and a module that imports one that imports it back makes that hard to see and harder
//! to split into crates. This check keeps the direction from eroding.

#![forbid(unsafe_code)]

pub mod graph;
pub mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use graph::Graph;

/// Why a crate's sources could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Lex { path: PathBuf, source: scan::LexError },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The graph of the crate's top-level modules (the crate root's entry of [`module_graphs`]).
pub fn module_graph(src: &Path) -> Result<Graph> {
    Ok(module_graphs(src)?.remove(&Vec::new()).unwrap_or_default())
}

/// For the crate root (the empty path) and each module with children, the graph of
/// its children.
pub fn module_graphs(src: &Path) -> Result<BTreeMap<Vec<String>, Graph>> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    // Every module, and the folders above a file (a folder module needs no mod.rs).
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .filter_map(|f| module_path(src, f))
        .flat_map(|m| (1..=m.len()).map(move |n| m[..n].to_vec()))
        .collect();
    let mut graphs: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_path(src, file) else { continue };
        let text = std::fs::read_to_string(file).map_err(|source| Error::Io { path: file.clone(), source })?;
        let paths = scan::paths(&text, &module).map_err(|source| Error::Lex { path: file.clone(), source })?;
        let shown = file.strip_prefix(src).unwrap_or(file).display().to_string();
        for r in &paths {
            // The edge is where the two paths part: between siblings under their common parent.
            let common = module.iter().zip(&r.path).take_while(|(a, b)| a == b).count();
            if common < module.len() && common < r.path.len() && modules.contains(&r.path[..=common]) {
                let graph = graphs.entry(module[..common].to_vec()).or_default();
                graph.add(&module[common], &r.path[common], || format!("{shown}:{}", r.line));
            }
        }
    }
    Ok(graphs)
}

/// Panics when the crate in `src` has a module cycle, naming each circle and the line
/// that makes each of its steps:
///
/// ```text
/// module cycle in exporter/src: config -> health -> config
///   config -> health at config.rs:130
///   health -> config at health/config.rs:22
/// ```
pub fn assert_no_cycle(src: impl AsRef<Path>) {
    let src = src.as_ref();
    let graphs = module_graphs(src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    let report: String = graphs
        .iter()
        .map(|(scope, graph)| describe_cycles(graph, &scope.iter().fold(src.to_path_buf(), |p, m| p.join(m))))
        .collect();
    assert!(report.is_empty(), "{report}");
}

/// Every circle in `graph`, one paragraph each; empty when there is none.
pub fn describe_cycles(graph: &Graph, src: &Path) -> String {
    let mut out = String::new();
    for circle in graph.cycles() {
        let _ = writeln!(out, "module cycle in {}: {}", src.display(), circle.join(" -> "));
        for step in circle.windows(2) {
            let at = graph.edge(&step[0], &step[1]).unwrap_or("?");
            let _ = writeln!(out, "  {} -> {} at {at}", step[0], step[1]);
        }
    }
    out
}

/// The module path of a file below `src` (`a/b.rs` -> `[a, b]`, `a/mod.rs` -> `[a]`);
/// `None` for the crate root and `src/bin/`.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let relative = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    match parts.first().map(String::as_str) {
        None | Some("lib" | "main" | "bin") => None,
        Some(_) => Some(parts),
    }
}

/// Every `.rs` file below `dir`, in name order.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let io = |source| Error::Io { path: dir.to_owned(), source };
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(io)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>().map_err(io)?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_paths_map_to_module_paths() {
        let src = Path::new("/c/src");
        let path = |f: &str| module_path(src, &src.join(f));
        assert_eq!(path("a.rs"), Some(vec!["a".to_owned()]));
        assert_eq!(path("a/mod.rs"), Some(vec!["a".to_owned()]));
        assert_eq!(path("a/b/c.rs"), Some(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]));
        assert_eq!(path("lib.rs"), None);
        assert_eq!(path("main.rs"), None);
        assert_eq!(path("bin/tool.rs"), None);
    }
}
