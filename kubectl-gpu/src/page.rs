//! One exporter page, parsed as it arrives, within bounds: nothing of the page is held
//! but the line being read, the samples kept and the parser's table of family names (as
//! hashes, at most 20,000), so memory does not follow the page's size, and a page that
//! never ends is cut.
//!
//! The bounds are the metrics adapter's for the same pages, from the one exposition
//! parser ([`Limits::default`]: 16 MiB, 500,000 samples, 64 KiB a line, 64 labels,
//! 4 KiB a label value, 20,000 families), so both read what one accepts. One more
//! bound is this command's own: the samples of the families it keeps
//! ([`crate::readings::FAMILIES`]) may take at most [`MAX_KEPT_BYTES`] in memory. An 8-GPU node with 56 MIG instances
//! and a pod on each keeps well under 1 MiB; without the bound a page of 16 MiB of
//! short kept samples (`gpu_up{gpu="1"} 1`) would take about 200 MB, and `kubectl gpu
//! nodes` reads 64 exporters at once.
//!
//! The page is fed in chunks; each complete line goes to the project's one exposition
//! parser as it arrives ([`exposition_parser::Parser`]), so the result, and any error
//! with its line number, is what one parse of the whole page gives. In OpenMetrics,
//! `# EOF` ends the page and the read stops there (what follows is not read), and a
//! page that ends without it was cut short and is refused; in the text format a page
//! simply ends.

use exposition_parser::{Error as ParseError, Format, Limits, Parser, Sample};

/// Most memory the kept samples of one page may take (an estimate: their strings,
/// vectors and allocator overhead).
pub const MAX_KEPT_BYTES: usize = 4 << 20;

/// Why a page was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum PageError {
    #[error("the page is larger than the limit of {limit} bytes; the read stopped there")]
    TooLarge { limit: usize },
    #[error("the GPU series of the page take more than the limit of {limit} bytes in memory")]
    TooManyKept { limit: usize },
    /// A limit of the parser's: line length, sample count, labels, label value length.
    #[error("{0}; the read stopped there")]
    Limit(ParseError),
    #[error("the exporter's page does not parse: {0}")]
    Parse(ParseError),
}

impl From<ParseError> for PageError {
    fn from(e: ParseError) -> PageError {
        match e {
            ParseError::Limit { .. } => PageError::Limit(e),
            ParseError::TooLarge { limit, .. } => PageError::TooLarge { limit },
            other => PageError::Parse(other),
        }
    }
}

impl PageError {
    /// Whether a limit refused the page (rather than its syntax).
    pub fn is_limit(&self) -> bool {
        !matches!(self, PageError::Parse(_))
    }
}

pub type Result<T, E = PageError> = std::result::Result<T, E>;

/// A page being read.
pub struct PageParser<F> {
    parser: Parser,
    limits: Limits,
    kept_limit: usize,
    wanted: F,
    /// The line not yet ended.
    pending: Vec<u8>,
    /// Bytes fed so far.
    bytes: usize,
    kept: Vec<Sample>,
    kept_bytes: usize,
}

/// About what a sample takes in memory: the struct, each allocation and its overhead.
fn cost(s: &Sample) -> usize {
    const ALLOCATION: usize = 16;
    let pair = std::mem::size_of::<(String, String)>();
    let labels: usize = s.labels.iter().map(|(k, v)| k.capacity() + v.capacity() + 2 * ALLOCATION).sum();
    std::mem::size_of::<Sample>() + s.name.capacity() + ALLOCATION + s.labels.capacity() * pair + ALLOCATION + labels
}

impl<F: Fn(&str) -> bool> PageParser<F> {
    /// A page in `format`, refused past `limits` or past `kept_limit` bytes of kept samples.
    pub fn new(format: Format, limits: Limits, kept_limit: usize, wanted: F) -> PageParser<F> {
        PageParser {
            parser: Parser::new(format, limits),
            limits,
            kept_limit,
            wanted,
            pending: Vec::new(),
            bytes: 0,
            kept: Vec::new(),
            kept_bytes: 0,
        }
    }

    /// Feeds the next bytes of the page. `Ok(true)`: the page has ended (`# EOF`) and
    /// nothing more needs reading.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<bool> {
        if self.parser.ended() {
            return Ok(true);
        }
        self.bytes = self.bytes.saturating_add(chunk.len());
        if self.bytes > self.limits.max_bytes {
            return Err(PageError::TooLarge { limit: self.limits.max_bytes });
        }
        self.pending.extend_from_slice(chunk);
        // Only a chunk with a line end completes lines: the pending bytes before it
        // hold none, so each byte is searched once.
        if chunk.contains(&b'\n') {
            let pending = std::mem::take(&mut self.pending);
            let mut start = 0;
            let mut read = Ok(());
            while let Some(end) = pending.get(start..).and_then(|rest| rest.iter().position(|b| *b == b'\n')) {
                let line = pending.get(start..start + end).unwrap_or_default();
                start += end + 1;
                read = self.line(line);
                if read.is_err() || self.parser.ended() {
                    break;
                }
            }
            self.pending = pending;
            self.pending.drain(..start.min(self.pending.len()));
            read?;
        }
        if self.parser.ended() {
            return Ok(true);
        }
        if self.pending.len() > self.limits.max_line_bytes {
            let (line, limit) = (self.parser.lines() + 1, self.limits.max_line_bytes);
            return Err(PageError::Limit(ParseError::Limit { line, what: "line length", limit }));
        }
        Ok(false)
    }

    /// What the kept samples take so far (the estimate [`MAX_KEPT_BYTES`] bounds).
    pub fn kept_bytes(&self) -> usize {
        self.kept_bytes
    }

    /// The page has been read to its end: the kept samples. An OpenMetrics page that
    /// never reached `# EOF` was cut short and is refused.
    pub fn finish(mut self) -> Result<Vec<Sample>> {
        if !self.parser.ended() && !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            self.line(&pending)?;
        }
        self.parser.finish()?;
        Ok(self.kept)
    }

    /// One complete line (the last may lack its `\n` at the page's end).
    fn line(&mut self, raw: &[u8]) -> Result<()> {
        if let Some(sample) = self.parser.line(raw, &self.wanted)? {
            self.kept_bytes += cost(&sample);
            if self.kept_bytes > self.kept_limit {
                return Err(PageError::TooManyKept { limit: self.kept_limit });
            }
            self.kept.push(sample);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &str, limits: Limits) -> std::result::Result<Vec<Sample>, ParseError> {
        exposition_parser::parse(text.as_bytes(), Format::PrometheusText, &limits, |_| true)
    }

    fn chunked(text: &str, size: usize, limits: Limits, kept: usize) -> Result<Vec<Sample>> {
        let mut p = PageParser::new(Format::PrometheusText, limits, kept, |_: &str| true);
        for chunk in text.as_bytes().chunks(size) {
            if p.feed(chunk)? {
                break;
            }
        }
        p.finish()
    }

    const PAGE: &str = "# HELP gpu_up up\n# TYPE gpu_up gauge\ngpu_up{gpu=\"0\"} 1\ngpu_up{gpu=\"1\"} 0\n\ngpu_info{gpu=\"0\",model=\"A\\nB\"} 1";

    #[test]
    fn a_page_in_chunks_parses_as_the_whole_page() {
        let expected = whole(PAGE, Limits::default()).unwrap();
        assert_eq!(expected.len(), 3);
        assert_eq!(expected[2].label("model"), Some("A\nB"), "the escaped newline is a real one");
        for size in [1, 2, 5, 17, 64, 4096] {
            assert_eq!(chunked(PAGE, size, Limits::default(), MAX_KEPT_BYTES).unwrap(), expected, "chunks of {size}");
        }
    }

    #[test]
    fn errors_name_the_line_of_the_page_and_its_limits() {
        let bad = "a 1\nb 2\nc{ 3\n";
        let expected = whole(bad, Limits::default()).unwrap_err();
        for size in [1, 3, 100] {
            assert_eq!(chunked(bad, size, Limits::default(), MAX_KEPT_BYTES), Err(PageError::Parse(expected.clone())));
        }
        let limits = Limits { max_samples: 2, ..Limits::default() };
        let expected = whole("a 1\n# x\nb 2\nc 3\n", limits).unwrap_err();
        assert_eq!(expected, ParseError::Limit { line: 4, what: "sample count", limit: 2 });
        for size in [1, 4, 100] {
            let e = chunked("a 1\n# x\nb 2\nc 3\n", size, limits, MAX_KEPT_BYTES).unwrap_err();
            assert_eq!(e, PageError::Limit(expected.clone()), "chunks of {size}");
            assert!(e.is_limit());
        }
        let mut p = PageParser::new(Format::PrometheusText, Limits::default(), MAX_KEPT_BYTES, |_: &str| true);
        p.feed(b"a 1\n").unwrap();
        assert_eq!(p.feed(b"b\xff 2\n"), Err(PageError::Parse(ParseError::NotUtf8(5))), "at the page's byte 5");
    }

    #[test]
    fn the_read_stops_at_the_byte_limit_the_line_limit_and_eof() {
        let limits = Limits { max_bytes: 10, ..Limits::default() };
        assert_eq!(chunked("a 1\nb 2\nc 3\n", 4, limits, MAX_KEPT_BYTES), Err(PageError::TooLarge { limit: 10 }));
        let limits = Limits { max_line_bytes: 8, ..Limits::default() };
        let e = chunked("a 1\nabcdefghijk", 3, limits, MAX_KEPT_BYTES).unwrap_err();
        assert_eq!(e, PageError::Limit(ParseError::Limit { line: 2, what: "line length", limit: 8 }));
        assert_eq!(e.to_string(), "line 2: line length exceeds the limit of 8; the read stopped there");
        let mut p = PageParser::new(Format::OpenMetrics, Limits::default(), MAX_KEPT_BYTES, |_: &str| true);
        assert!(p.feed(b"a 1\n# EOF\n").unwrap(), "the page ended");
        assert!(p.feed(b"never read {{{").unwrap());
        assert_eq!(p.finish().unwrap().len(), 1);
    }

    #[test]
    fn an_openmetrics_page_must_reach_its_eof() {
        let page = "# TYPE gpu_up gauge\ngpu_up{gpu=\"0\"} 1\ngpu_up{gpu=\"1\"} 0\n# EOF\n";
        let whole = exposition_parser::parse(page.as_bytes(), Format::OpenMetrics, &Limits::default(), |_| true);
        let whole = whole.unwrap();
        assert_eq!(whole.len(), 2);
        for size in [1, 3, 7, 64] {
            let mut p = PageParser::new(Format::OpenMetrics, Limits::default(), MAX_KEPT_BYTES, |_: &str| true);
            let mut ended = false;
            for chunk in page.as_bytes().chunks(size) {
                ended = p.feed(chunk).unwrap();
            }
            assert!(ended, "chunks of {size}: the page ended at '# EOF'");
            assert_eq!(p.finish().unwrap(), whole, "chunks of {size}");
        }
        let cut = &page[..page.find("# EOF").unwrap()];
        let mut p = PageParser::new(Format::OpenMetrics, Limits::default(), MAX_KEPT_BYTES, |_: &str| true);
        assert!(!p.feed(cut.as_bytes()).unwrap());
        let e = p.finish().unwrap_err();
        assert_eq!(e, PageError::Parse(ParseError::MissingEof { lines: 3 }));
        assert!(!e.is_limit(), "a cut page is a bad page, not one over a limit");
        let text = chunked("gpu_up 1\n# EOF\ngpu_up 2\n", 4, Limits::default(), MAX_KEPT_BYTES).unwrap();
        assert_eq!(text.len(), 2, "'# EOF' is a comment in the text format");
    }

    #[test]
    fn the_exporters_own_pages_keep_far_less_than_the_bound() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../exporter/tests/golden");
        let mut largest = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let format = match path.extension().and_then(|e| e.to_str()) {
                Some("prom") => Format::PrometheusText,
                Some("openmetrics") => Format::OpenMetrics,
                _ => continue,
            };
            let text = std::fs::read(&path).unwrap();
            let wanted = |f: &str| crate::readings::FAMILIES.contains(&f);
            let mut p = PageParser::new(format, Limits::default(), MAX_KEPT_BYTES, wanted);
            for chunk in text.chunks(8192) {
                p.feed(chunk).unwrap();
            }
            largest = largest.max(p.kept_bytes());
            assert!(!p.finish().unwrap().is_empty(), "{}", path.display());
        }
        assert!(largest > 0 && largest < MAX_KEPT_BYTES / 4, "largest kept: {largest} bytes");
    }

    #[test]
    fn kept_samples_are_bounded_and_unwanted_ones_cost_nothing() {
        let page: String = (0..1000).map(|i| format!("gpu_up{{gpu=\"{i}\"}} 1\n")).collect();
        assert_eq!(chunked(&page, 512, Limits::default(), 10_000), Err(PageError::TooManyKept { limit: 10_000 }));
        let mut p = PageParser::new(Format::PrometheusText, Limits::default(), 10_000, |f: &str| f == "gpu_info");
        for chunk in page.as_bytes().chunks(512) {
            p.feed(chunk).unwrap();
        }
        assert!(p.finish().unwrap().is_empty());
    }
}
