//! Text from outside the plugin, made safe for a terminal: every control character is
//! shown, never obeyed.
//!
//! Exporter labels (model, uuid, pod, health reasons, NVML error text), Node and Pod
//! fields and the API server's error messages are chosen by whoever runs an exporter or
//! may patch `nodes/status`. Written raw, an ESC starts a sequence that clears the
//! screen, retitles the window or plants an OSC-8 hyperlink, and a CR or LF forges a
//! table row. kubectl escapes such text since its fix for CVE-2021-25743
//! (k8s.io/cli-runtime/pkg/printers/terminal.go, `EscapeTerminal`: ESC as `^[`, CR as
//! `\r`, applied to every table cell and description). This module does the same, and
//! goes further, to every character a terminal may act on:
//!
//! - ESC as `^[` and CR as `\r`, as kubectl writes them; LF as `\n` and TAB as `\t`;
//! - the other C0 controls and DEL in caret notation (`^G` for BEL, `^?` for DEL);
//! - the C1 controls (U+0080..U+009F; U+009B is a one-character CSI to some
//!   terminals) as `\u{9b}`.
//!
//! The escaped form is what the table measures, so a forged label widens its column
//! and cannot push the others. Like kubectl's, the escaping is for reading, not
//! reversible; `-o json` and `-o yaml` carry the values unchanged (their encoders quote
//! control characters themselves).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is a character a terminal may act on.
fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// `text` with every control character made visible; borrowed when there is none.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\u{1b}' => out.push_str("^["),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\u{7f}' => out.push_str("^?"),
            '\u{0}'..='\u{1f}' => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            '\u{80}'..='\u{9f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Multi-line text from the plugin (a summary, an error frame) whose lines may quote
/// outside text: each line escaped, the plugin's own line breaks kept.
pub fn lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&escape(line));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_is_made_visible() {
        assert_eq!(escape("\x1b[2J\x1b[H"), "^[[2J^[[H", "ESC as kubectl writes it");
        assert_eq!(escape("\x1b]0;pwned\x07"), "^[]0;pwned^G", "an OSC title with its BEL");
        assert_eq!(escape("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"), "^[]8;;http://x^[\\link^[]8;;^[\\");
        assert_eq!(escape("A100\rSPOOF"), "A100\\rSPOOF");
        assert_eq!(escape("a\nFAKE-ROW\tx"), "a\\nFAKE-ROW\\tx");
        assert_eq!(escape("\0\x01\x08\x1f\x7f"), "^@^A^H^_^?");
        assert_eq!(escape("\u{9b}2J\u{85}"), "\\u{9b}2J\\u{85}");
        for c in (0u32..=0x9f).filter_map(char::from_u32) {
            let shown = escape(&c.to_string()).into_owned();
            assert!(!shown.chars().any(is_control), "{c:?} shown as {shown:?}");
        }
    }

    #[test]
    fn plain_text_and_printable_unicode_are_left_alone() {
        assert!(matches!(escape("NVIDIA H100 80GB HBM3"), Cow::Borrowed(_)));
        assert_eq!(escape("4× A100 — 91 °C, ü"), "4× A100 — 91 °C, ü");
        assert_eq!(escape("\u{a0}\u{100}"), "\u{a0}\u{100}", "U+00A0 and above are not C1");
    }

    #[test]
    fn lines_keep_their_breaks_and_escape_what_is_inside() {
        assert_eq!(lines("total: 3\nmodel \x1b[31mX\r\n"), "total: 3\nmodel ^[[31mX\\r\n");
    }
}
