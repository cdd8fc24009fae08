//! The terminal edge: whether stdout is a terminal (colour, redraw in place), and the
//! frames `--watch` writes.
//!
//! Colour only on a terminal, and never with `NO_COLOR` set (no-color.org) or
//! `TERM=dumb`, unless `--color always`. `--watch` on a terminal redraws in place: the
//! cursor goes home, each line clears what was left of the last frame's, and what is
//! below the new frame is cleared, so the table does not flicker or scroll; off a
//! terminal (a pipe, a file) every refresh is written after the last, a blank line
//! between, with no escape codes at all.

use std::io::IsTerminal;

use crate::cli::Colour;

/// What stdout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminal {
    pub tty: bool,
    pub colour: bool,
}

/// Decides colour from the flag, whether stdout is a terminal, and the environment.
pub fn colour(flag: Colour, tty: bool, no_color: Option<&str>, term: Option<&str>) -> bool {
    match flag {
        Colour::Always => true,
        Colour::Never => false,
        Colour::Auto => tty && no_color.is_none_or(str::is_empty) && term != Some("dumb"),
    }
}

impl Terminal {
    /// Looks at this process's stdout and environment.
    pub fn detect(flag: Colour) -> Terminal {
        let tty = std::io::stdout().is_terminal();
        let no_color = std::env::var("NO_COLOR").ok();
        let term = std::env::var("TERM").ok();
        Terminal { tty, colour: colour(flag, tty, no_color.as_deref(), term.as_deref()) }
    }
}

/// Clears the screen once, when watching starts on a terminal.
pub const CLEAR: &str = "\x1b[2J\x1b[H";

/// One redraw in place: home, every line followed by clear-to-end-of-line, then clear
/// below.
pub fn redraw(text: &str) -> String {
    let mut out = String::from("\x1b[H");
    for line in text.lines() {
        out.push_str(line);
        out.push_str("\x1b[K\n");
    }
    out.push_str("\x1b[J");
    out
}

/// The line above a watched frame: what runs, how often, and when it was drawn.
pub fn header(command: &str, every: &str, at: &str) -> String {
    format!("Every {every}: kubectl gpu {command}    {at}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(Colour::Auto, true, None, Some("xterm")));
        assert!(!colour(Colour::Auto, false, None, None), "a pipe gets no colour");
        assert!(!colour(Colour::Auto, true, Some("1"), None), "NO_COLOR");
        assert!(colour(Colour::Auto, true, Some(""), None), "an empty NO_COLOR is unset");
        assert!(!colour(Colour::Auto, true, None, Some("dumb")));
        assert!(colour(Colour::Always, false, Some("1"), None));
        assert!(!colour(Colour::Never, true, None, None));
    }

    #[test]
    fn a_redraw_overwrites_in_place() {
        assert_eq!(redraw("a\nbb\n"), "\x1b[Ha\x1b[K\nbb\x1b[K\n\x1b[J");
        assert_eq!(header("nodes", "2s", "12:00:00"), "Every 2s: kubectl gpu nodes    12:00:00\n\n");
    }
}
