//! Golden files: output a test produces, compared with a copy kept in the repository
//! (a whole file, or a block between two markers in a file people also edit, such as
//! README.md). With `UPDATE_GOLDEN` set in the environment the copy is rewritten instead
//! and the test passes, so an intended change is one run and a `git diff` to review.

use std::path::Path;

/// Whether this run rewrites golden copies (`UPDATE_GOLDEN` is set).
#[must_use]
pub fn updating() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some()
}

/// Compares `actual` with the file at `path`, or writes it there (creating its
/// directory) when [`updating`]. `regenerate` is the command that rewrites it, named in
/// the failure.
pub fn file(path: &Path, actual: &str, regenerate: &str) {
    if updating() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}; create it with {regenerate}", path.display()));
    if expected != actual {
        panic!(
            "{} differs: {}\nrun {regenerate} if the change is intended",
            path.display(),
            differences(&expected, actual)
        );
    }
}

/// Compares `actual` with the block of the file at `path` that starts with the first
/// `begin` and ends with the first `end` after it (both markers part of the block), or
/// puts `actual` in its place when [`updating`]. The file must have both markers.
pub fn block(path: &Path, begin: &str, end: &str, actual: &str, regenerate: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = text.find(begin).unwrap_or_else(|| panic!("{} lacks the marker {begin:?}", path.display()));
    let stop = text[start..]
        .find(end)
        .map(|at| start + at + end.len())
        .unwrap_or_else(|| panic!("{} lacks the marker {end:?} after {begin:?}", path.display()));
    let expected = &text[start..stop];
    if expected == actual {
        return;
    }
    if updating() {
        std::fs::write(path, format!("{}{actual}{}", &text[..start], &text[stop..])).unwrap();
        return;
    }
    panic!(
        "{}: the block from {begin:?} differs: {}\nrun {regenerate} if the change is intended",
        path.display(),
        differences(expected, actual)
    );
}

/// The line counts and the first ten lines that differ.
fn differences(expected: &str, actual: &str) -> String {
    let lines: Vec<String> = expected
        .lines()
        .zip(actual.lines())
        .enumerate()
        .filter(|(_, (e, a))| e != a)
        .take(10)
        .map(|(i, (e, a))| format!("line {}:\n  expected: {e}\n  actual:   {a}", i + 1))
        .collect();
    format!(
        "{} lines expected, {} produced; first differences:\n{}",
        expected.lines().count(),
        actual.lines().count(),
        if lines.is_empty() {
            "(none line by line: the shorter is a prefix of the longer)".into()
        } else {
            lines.join("\n")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_lines_that_differ() {
        let d = differences("a\nb\nc\n", "a\nB\nc\nd\n");
        assert!(d.starts_with("3 lines expected, 4 produced"), "{d}");
        assert!(d.contains("line 2:\n  expected: b\n  actual:   B"), "{d}");
        assert!(differences("a\n", "a\nb\n").contains("prefix"));
    }

    #[test]
    fn a_block_is_compared_between_its_markers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("README.md");
        std::fs::write(&path, "intro\n<!-- begin -->\nold\n<!-- end -->\noutro\n").unwrap();
        block(&path, "<!-- begin -->", "<!-- end -->\n", "<!-- begin -->\nold\n<!-- end -->\n", "nothing");
        if updating() {
            return;
        }
        let changed = std::panic::catch_unwind(|| {
            block(&path, "<!-- begin -->", "<!-- end -->\n", "<!-- begin -->\nnew\n<!-- end -->\n", "UPDATE_GOLDEN=1 x")
        });
        let message = *changed.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.contains("expected: old\n  actual:   new") && message.contains("UPDATE_GOLDEN=1 x"),
            "{message}"
        );
    }
}
