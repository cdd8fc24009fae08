//! One source file to the crate paths it names.
//!
//! A file is read as Rust tokens (so comments, doc comments and string literals never
//! count) and four path forms are picked out, wherever they stand (`use` lines, paths
//! in expressions and types, macro arguments), each resolved to a path from the crate
//! root:
//! - `crate::x::y` and `crate::{x, y::z}`: `x::y`, `x`, `y::z`;
//! - `super::` chains, climbing from the file's module: from `src/a/b.rs`,
//!   `super::c` is `a::c` and `super::super::x` is `x`;
//! - `self::c`, from the file's module down;
//! - `$crate::x` in a macro, which is the same as `crate::x`.
//!
//! Inline modules (`mod tests { ... }`) count as one more level for `super::`. Whether
//! a path names a module at all is left to the caller, which knows the crate's modules.

use std::str::FromStr;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// A path in a file that names a top-level module (or some other item of the crate root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The first path segment below the crate root.
    pub target: String,
    /// 1-based line of the path.
    pub line: usize,
}

/// A crate path named in a file, from the crate root (`["render", "labels", "LabelSet"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRef {
    pub path: Vec<String>,
    /// 1-based line of the path.
    pub line: usize,
}

/// The text is not Rust tokens (an unclosed string or bracket).
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LexError {
    pub line: usize,
    pub message: String,
}

/// Every reference to a crate-root item in `source`, a file at module depth `depth`
/// (1 for `src/a.rs` and `src/a/mod.rs`, 2 for `src/a/b.rs`, ...): the paths of
/// [`paths`] that leave the file's top-level module or start at the root.
pub fn references(source: &str, depth: usize) -> Result<Vec<Reference>, LexError> {
    // A placeholder module path: a path still inside it starts with the placeholder.
    let module = vec![String::from("\0"); depth];
    let mut refs: Vec<Reference> = paths(source, &module)?
        .into_iter()
        .filter_map(|r| {
            let target = r.path.into_iter().next()?;
            (target != "\0").then_some(Reference { target, line: r.line })
        })
        .collect();
    // `crate::c::{D, E}` names `c` once.
    refs.dedup();
    Ok(refs)
}

/// Every crate path in `source`, a file of module `module` (`["a", "b"]` for
/// `src/a/b.rs`), resolved from the crate root.
pub fn paths(source: &str, module: &[String]) -> Result<Vec<PathRef>, LexError> {
    let tokens =
        TokenStream::from_str(source).map_err(|e| LexError { line: e.span().start().line, message: e.to_string() })?;
    let mut out = Vec::new();
    walk(tokens, &mut module.to_vec(), &mut out);
    Ok(out)
}

/// Walks one token level; `module` is where `super::` and `self::` start from.
fn walk(stream: TokenStream, module: &mut Vec<String>, out: &mut Vec<PathRef>) {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Ident(word) if word == "mod" => {
                if let (Some(TokenTree::Ident(name)), Some(TokenTree::Group(body))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                    && body.delimiter() == Delimiter::Brace
                {
                    module.push(name.to_string());
                    walk(body.stream(), module, out);
                    module.pop();
                    i += 3;
                    continue;
                }
            }
            TokenTree::Ident(word) if (word == "crate" || word == "self") && path_separator_at(&tokens, i + 1) => {
                let line = word.span().start().line;
                let prefix: &[String] = if word == "crate" { &[] } else { module };
                out.extend(paths_at(&tokens, i + 3, prefix).into_iter().map(|path| PathRef { path, line }));
                i += 3;
                continue;
            }
            TokenTree::Ident(word) if word == "super" && path_separator_at(&tokens, i + 1) => {
                let line = word.span().start().line;
                let mut climbs = 0;
                let mut next = i;
                while matches!(&tokens.get(next), Some(TokenTree::Ident(w)) if w == "super")
                    && path_separator_at(&tokens, next + 1)
                {
                    climbs += 1;
                    next += 3;
                }
                if climbs <= module.len() {
                    let prefix = &module[..module.len() - climbs];
                    out.extend(paths_at(&tokens, next, prefix).into_iter().map(|path| PathRef { path, line }));
                }
                i = next;
                continue;
            }
            TokenTree::Group(group) => walk(group.stream(), module, out),
            _ => {}
        }
        i += 1;
    }
}

/// The paths at `tokens[at..]` after `prefix`: `a::b`, or one per item of a `{...}`
/// group (`self` in a group is the prefix itself), a glob ending at its module.
fn paths_at(tokens: &[TokenTree], at: usize, prefix: &[String]) -> Vec<Vec<String>> {
    let mut path = prefix.to_vec();
    let mut j = at;
    loop {
        match tokens.get(j) {
            Some(TokenTree::Ident(name)) => {
                path.push(name.to_string());
                if !path_separator_at(tokens, j + 1) {
                    return vec![path];
                }
                j += 3;
            }
            Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
                let items: Vec<TokenTree> = group.stream().into_iter().collect();
                return items
                    .split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
                    .filter(|item| !item.is_empty())
                    .flat_map(|item| match item.first() {
                        Some(TokenTree::Ident(w)) if w == "self" => vec![path.clone()],
                        _ => paths_at(item, 0, &path),
                    })
                    .collect();
            }
            _ => return if path.len() > prefix.len() { vec![path] } else { Vec::new() },
        }
    }
}

/// Whether `tokens[at..]` starts with `::`.
fn path_separator_at(tokens: &[TokenTree], at: usize) -> bool {
    match (tokens.get(at), tokens.get(at + 1)) {
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) => {
            a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(source: &str, depth: usize) -> Vec<String> {
        references(source, depth).unwrap().into_iter().map(|r| r.target).collect()
    }

    #[test]
    fn crate_paths_in_use_lines_expressions_and_groups() {
        let source = "use crate::a::B;\nuse crate::{b, c::{D, E}, self};\nfn f() { crate::d::g(); let _ = format!(\"{}\", crate::e::h()); }";
        assert_eq!(targets(source, 1), ["a", "b", "c", "d", "e"]);
        let refs = references(source, 1).unwrap();
        assert_eq!(refs.iter().map(|r| r.line).collect::<Vec<_>>(), [1, 2, 2, 3, 3]);
    }

    #[test]
    fn comments_strings_and_visibility_are_not_paths() {
        let source = "//! see crate::a\n/// crate::b\n// crate::c\n/* crate::d */\npub(crate) fn f() -> &'static str { \"crate::e\" }\nconst R: &str = r#\"crate::f\"#;\npub(super) fn g() {}";
        assert!(targets(source, 1).is_empty());
    }

    #[test]
    fn super_counts_only_when_it_reaches_the_crate_root() {
        // src/a.rs: one super reaches the root.
        assert_eq!(targets("use super::b;", 1), ["b"]);
        // src/a/x.rs: one super stays inside a, two reach the root.
        assert!(targets("use super::y;", 2).is_empty());
        assert_eq!(targets("use super::super::{b, c};", 2), ["b", "c"]);
        // An inline module adds a level.
        assert!(targets("mod tests { use super::*; use super::b; }", 1).is_empty());
        assert_eq!(targets("mod tests { use super::super::b; }", 1), ["b"]);
    }

    fn resolved(source: &str, module: &[&str]) -> Vec<String> {
        let module: Vec<String> = module.iter().map(|m| m.to_string()).collect();
        paths(source, &module).unwrap().into_iter().map(|r| r.path.join("::")).collect()
    }

    #[test]
    fn paths_resolve_from_the_crate_root() {
        // From src/render/mig.rs.
        let m = ["render", "mig"];
        assert_eq!(resolved("use super::labels::LabelSet;", &m), ["render::labels::LabelSet"]);
        assert_eq!(
            resolved("use super::{pods::push, sink as s, self};", &m),
            ["render::pods::push", "render::sink", "render"]
        );
        assert_eq!(resolved("use super::super::snapshot::Snapshot;", &m), ["snapshot::Snapshot"]);
        assert_eq!(resolved("use crate::render::{labels::{A, B}};", &m), ["render::labels::A", "render::labels::B"]);
        assert_eq!(resolved("use self::inner::X;", &m), ["render::mig::inner::X"]);
        // A glob of the parent names no path of its own.
        assert_eq!(resolved("mod tests { use super::*; use super::super::pods::f; }", &m), ["render::pods::f"]);
        assert!(resolved("use super::super::super::x;", &m).is_empty(), "above the root");
    }

    #[test]
    fn macro_crate_paths_count() {
        assert_eq!(targets("macro_rules! m { () => { $crate::b::f() }; }", 1), ["b"]);
    }

    #[test]
    fn text_that_is_not_rust_is_refused_with_its_line() {
        let err = references("fn f() {\n let s = \"open;\n}", 1).unwrap_err();
        assert!(err.line >= 1, "{err}");
    }
}
