//! One source file to the top-level modules it names.
//!
//! A file is read as Rust tokens (so comments, doc comments and string literals never
//! count) and three path forms are picked out, wherever they stand (`use` lines, paths
//! in expressions and types, macro arguments):
//! - `crate::x` and `crate::{x, y::z}`: top-level modules `x` and `y`;
//! - `super::` chains that climb out of the file's top-level module to the crate root:
//!   from `src/a/b.rs`, `super::super::x` names `x`;
//! - `$crate::x` in a macro, which is the same as `crate::x`.
//!
//! Inline modules (`mod tests { ... }`) count as one more level for `super::`. Whether
//! a name after the path is a module at all is left to the caller, which knows the
//! crate's top-level modules.

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

/// The text is not Rust tokens (an unclosed string or bracket).
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LexError {
    pub line: usize,
    pub message: String,
}

/// Every reference to a crate-root item in `source`, a file at module depth `depth`
/// (1 for `src/a.rs` and `src/a/mod.rs`, 2 for `src/a/b.rs`, ...).
pub fn references(source: &str, depth: usize) -> Result<Vec<Reference>, LexError> {
    let tokens =
        TokenStream::from_str(source).map_err(|e| LexError { line: e.span().start().line, message: e.to_string() })?;
    let mut out = Vec::new();
    walk(tokens, depth, &mut out);
    Ok(out)
}

/// Walks one token level; `depth` is how many `super::` reach the crate root.
fn walk(stream: TokenStream, depth: usize, out: &mut Vec<Reference>) {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Ident(word) if word == "mod" => {
                if let (Some(TokenTree::Ident(_)), Some(TokenTree::Group(body))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                    && body.delimiter() == Delimiter::Brace
                {
                    walk(body.stream(), depth + 1, out);
                    i += 3;
                    continue;
                }
            }
            TokenTree::Ident(word) if word == "crate" && path_separator_at(&tokens, i + 1) => {
                let line = word.span().start().line;
                out.extend(names_at(&tokens, i + 3).into_iter().map(|target| Reference { target, line }));
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
                if climbs == depth {
                    out.extend(names_at(&tokens, next).into_iter().map(|target| Reference { target, line }));
                }
                i = next;
                continue;
            }
            TokenTree::Group(group) => walk(group.stream(), depth, out),
            _ => {}
        }
        i += 1;
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

/// The first segment of the path at `tokens[at]`, or of each path in a `{...}` group.
fn names_at(tokens: &[TokenTree], at: usize) -> Vec<String> {
    match tokens.get(at) {
        Some(TokenTree::Ident(name)) => vec![name.to_string()],
        Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
            let mut names = Vec::new();
            let mut at_item_start = true;
            for token in group.stream() {
                match &token {
                    TokenTree::Punct(p) if p.as_char() == ',' => at_item_start = true,
                    TokenTree::Ident(name) if at_item_start => {
                        if name != "self" {
                            names.push(name.to_string());
                        }
                        at_item_start = false;
                    }
                    _ => at_item_start = false,
                }
            }
            names
        }
        _ => Vec::new(),
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
