//! Table layout as kubectl prints it: upper-case headers, columns three spaces apart,
//! no trailing blanks; text left-aligned and figures right-aligned; `-o wide` adds the
//! wide-only columns. Colour (ANSI) only when asked, which the terminal edge decides.
//!
//! Every cell is written through [`crate::sanitize::escape`] and measured in that form:
//! cells carry text from exporters and Node objects, and a control character in one
//! could otherwise drive the terminal or forge a row (kubectl's CVE-2021-25743).
//!
//! A table is also what `--sort-by` sorts ([`Table::sort`]): each cell carries a sort
//! key, so figures sort as numbers (unknown and absent last, whatever the direction),
//! and the footer (totals) stays at the bottom.

use crate::sanitize::escape;

/// How a cell reads at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tone {
    #[default]
    Plain,
    Good,
    Warn,
    Bad,
    Dim,
}

/// What a cell sorts by.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Key {
    Text(String),
    Number(f64),
    /// Unknown or absent: sorts last.
    #[default]
    Missing,
}

/// One cell.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cell {
    pub text: String,
    pub tone: Tone,
    pub key: Key,
}

impl Cell {
    pub fn text(text: impl Into<String>) -> Cell {
        let text = text.into();
        Cell { key: Key::Text(text.clone()), text, tone: Tone::Plain }
    }

    /// A figure: `text` shown, `value` sorted by (`None`: sorts last).
    pub fn number(text: impl Into<String>, value: Option<f64>) -> Cell {
        Cell { text: text.into(), tone: Tone::Plain, key: value.map_or(Key::Missing, Key::Number) }
    }

    pub fn tone(mut self, tone: Tone) -> Cell {
        self.tone = tone;
        self
    }
}

/// One column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub header: &'static str,
    /// Shown with `-o wide` only.
    pub wide: bool,
    /// Right-aligned (figures).
    pub right: bool,
}

impl Column {
    pub const fn text(header: &'static str) -> Column {
        Column { header, wide: false, right: false }
    }

    pub const fn figure(header: &'static str) -> Column {
        Column { header, wide: false, right: true }
    }

    pub const fn wide(mut self) -> Column {
        self.wide = true;
        self
    }
}

/// Why a sort was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TableError {
    #[error("--sort-by {given:?}: no such column; columns are {columns}")]
    NoColumn { given: String, columns: String },
}

pub type Result<T, E = TableError> = std::result::Result<T, E>;

/// A table: columns, rows, and footer rows that are never sorted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
    pub footer: Vec<Vec<Cell>>,
}

fn normalize(name: &str) -> String {
    name.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase()
}

impl Table {
    /// The index of the column `name` names (header, case and punctuation ignored).
    pub fn column(&self, name: &str) -> Result<usize> {
        let wanted = normalize(name);
        self.columns.iter().position(|c| normalize(c.header) == wanted).ok_or_else(|| TableError::NoColumn {
            given: name.into(),
            columns: self.columns.iter().map(|c| c.header.to_ascii_lowercase()).collect::<Vec<_>>().join(", "),
        })
    }

    /// The permutation that sorts the rows by column `name` (`-name`: descending).
    pub fn sort_order(&self, name: &str) -> Result<Vec<usize>> {
        let (descending, name) = match name.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, name),
        };
        let col = self.column(name)?;
        let mut order: Vec<usize> = (0..self.rows.len()).collect();
        let key = |i: usize| self.rows[i].get(col).map(|c| &c.key).unwrap_or(&Key::Missing);
        order.sort_by(|&a, &b| {
            use std::cmp::Ordering;
            match (key(a), key(b)) {
                (Key::Missing, Key::Missing) => Ordering::Equal,
                (Key::Missing, _) => Ordering::Greater,
                (_, Key::Missing) => Ordering::Less,
                (x, y) => {
                    let o = match (x, y) {
                        (Key::Number(x), Key::Number(y)) => x.total_cmp(y),
                        (Key::Number(_), Key::Text(_)) => Ordering::Less,
                        (Key::Text(_), Key::Number(_)) => Ordering::Greater,
                        (Key::Text(x), Key::Text(y)) => natural(x, y),
                        _ => Ordering::Equal,
                    };
                    if descending { o.reverse() } else { o }
                }
            }
        });
        Ok(order)
    }

    /// Lays the table out; `colour` adds ANSI colours by tone.
    pub fn render(&self, wide: bool, colour: bool) -> String {
        let shown: Vec<usize> = (0..self.columns.len()).filter(|&i| wide || !self.columns[i].wide).collect();
        let header: Vec<Cell> = self.columns.iter().map(|c| Cell::text(c.header)).collect();
        // Escaped once, before anything is measured: the width is the width shown.
        let escaped: Vec<Vec<(String, Tone)>> = std::iter::once(&header)
            .chain(self.rows.iter().chain(&self.footer))
            .map(|row| {
                shown
                    .iter()
                    .map(|&i| {
                        row.get(i).map_or((String::new(), Tone::Plain), |c| (escape(&c.text).into_owned(), c.tone))
                    })
                    .collect()
            })
            .collect();
        let widths: Vec<usize> =
            (0..shown.len()).map(|n| escaped.iter().map(|row| row[n].0.chars().count()).max().unwrap_or(0)).collect();
        let mut out = String::new();
        for row in &escaped {
            let mut line = String::new();
            for (n, &i) in shown.iter().enumerate() {
                let (text, tone) = &row[n];
                let pad = widths[n].saturating_sub(text.chars().count());
                let last = n + 1 == shown.len();
                if n > 0 {
                    line.push_str("   ");
                }
                let text = paint(text, *tone, colour);
                if self.columns[i].right {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(&text);
                } else {
                    line.push_str(&text);
                    if !last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

fn paint(text: &str, tone: Tone, colour: bool) -> String {
    let code = match tone {
        _ if !colour || text.is_empty() => return text.to_string(),
        Tone::Plain => return text.to_string(),
        Tone::Good => "32",
        Tone::Warn => "33",
        Tone::Bad => "31",
        Tone::Dim => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// Orders text with embedded numbers by their value (`gpu-node-2` before `gpu-node-10`).
pub fn natural(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(&cb) {
        let o = match (x, y) {
            ((true, x), (true, y)) => {
                let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                x.len().cmp(&y.len()).then_with(|| x.cmp(y))
            }
            ((_, x), (_, y)) => x.cmp(y),
        };
        if o.is_ne() {
            return o;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            columns: vec![Column::text("NAME"), Column::figure("UTIL"), Column::text("NOTE").wide()],
            rows: vec![
                vec![Cell::text("gpu-node-10"), Cell::number("5%", Some(5.0)), Cell::text("x")],
                vec![Cell::text("gpu-node-2"), Cell::number("unknown", None).tone(Tone::Warn), Cell::text("")],
                vec![Cell::text("gpu-node-1"), Cell::number("74%", Some(74.0)).tone(Tone::Good), Cell::text("y")],
            ],
            footer: vec![vec![Cell::text("TOTAL"), Cell::number("40%", Some(40.0))]],
        }
    }

    #[test]
    fn columns_are_laid_out_like_kubectl() {
        let t = table();
        assert_eq!(
            t.render(false, false),
            "NAME             UTIL\ngpu-node-10        5%\ngpu-node-2    unknown\ngpu-node-1        74%\nTOTAL             40%\n"
        );
        let wide = t.render(true, false);
        assert!(wide.starts_with("NAME             UTIL   NOTE\ngpu-node-10        5%   x\n"), "{wide}");
        assert!(!wide.lines().any(|l| l.ends_with(' ')), "no trailing blanks");
        let coloured = t.render(false, true);
        assert!(coloured.contains("\x1b[33munknown\x1b[0m") && coloured.contains("\x1b[32m74%\x1b[0m"), "{coloured}");
        assert!(!t.render(false, false).contains('\x1b'));
    }

    #[test]
    fn control_characters_in_a_cell_are_shown_escaped_and_measured_so() {
        let t = Table {
            columns: vec![Column::text("NAME"), Column::text("MODEL"), Column::figure("UTIL")],
            rows: vec![
                vec![Cell::text("n1"), Cell::text("\x1b]0;t\x07A\rB\nFAKE-ROW"), Cell::number("5%", Some(5.0))],
                vec![Cell::text("n2"), Cell::text("A100"), Cell::number("74%", Some(74.0))],
            ],
            footer: vec![],
        };
        let text = t.render(false, true);
        assert_eq!(
            text,
            "NAME   MODEL                    UTIL\nn1     ^[]0;t^GA\\rB\\nFAKE-ROW     5%\nn2     A100                      74%\n"
        );
        assert_eq!(text.lines().count(), 3, "no forged row");
    }

    #[test]
    fn sorting_puts_missing_last_and_names_in_natural_order() {
        let t = table();
        assert_eq!(t.sort_order("name").unwrap(), [2, 1, 0]);
        assert_eq!(t.sort_order("UTIL").unwrap(), [0, 2, 1]);
        assert_eq!(t.sort_order("-util").unwrap(), [2, 0, 1], "missing stays last when descending");
        let e = t.sort_order("power").unwrap_err();
        assert_eq!(e.to_string(), "--sort-by \"power\": no such column; columns are name, util, note");
    }
}
