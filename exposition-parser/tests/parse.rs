//! The parser's behaviour on the pages the project serves and on the rules its header
//! lists, through the public API: whole payloads ([`parse`]) and payloads read a line
//! at a time ([`Parser`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use exposition_parser::{Error, Format, Limits, Parser, Sample, parse};

fn text(body: &str) -> Result<Vec<Sample>, Error> {
    parse(body.as_bytes(), Format::PrometheusText, &Limits::default(), |_| true)
}

fn om(body: &str) -> Result<Vec<Sample>, Error> {
    parse(body.as_bytes(), Format::OpenMetrics, &Limits::default(), |_| true)
}

/// Asserts `body` is refused with an error containing `needle`.
fn refused(result: Result<Vec<Sample>, Error>, body: &str, needle: &str) {
    match result {
        Ok(s) => panic!("{body:?} was accepted: {s:?}"),
        Err(e) => assert!(e.to_string().contains(needle), "{body:?}: {e} (expected {needle:?})"),
    }
}

#[test]
fn parses_exporter_families() {
    let body = "# HELP gpu_utilization GPU utilization in percent.\n\
        # TYPE gpu_utilization gauge\n\
        gpu_utilization{node=\"gpu-node-1\",gpu=\"0\",uuid=\"GPU-a\",model=\"NVIDIA H100 80GB HBM3\",namespace=\"ai-inference\",pod=\"inference-pool-0\",container=\"inference\"} 85\n\
        gpu_utilization{node=\"gpu-node-1\",gpu=\"1\",uuid=\"GPU-b\",model=\"NVIDIA H100 80GB HBM3\"} 12.5 1700000000000\n";
    let samples = text(body).unwrap();
    assert_eq!(samples.len(), 2);
    assert_eq!(samples[0].name, "gpu_utilization");
    assert_eq!(samples[0].label("pod"), Some("inference-pool-0"));
    assert_eq!(samples[0].value, 85.0);
    assert_eq!(samples[0].timestamp_ms, None);
    assert_eq!(samples[1].value, 12.5);
    assert_eq!(samples[1].timestamp_ms, Some(1_700_000_000_000));
}

#[test]
fn keeps_only_wanted_families_but_checks_every_line() {
    let body = "a 1\nb{x=\"y\"} 2\nc 3\n";
    let samples = parse(body.as_bytes(), Format::PrometheusText, &Limits::default(), |n| n == "b").unwrap();
    assert_eq!(samples.len(), 1);
    assert_eq!(samples[0].labels, vec![("x".to_owned(), "y".to_owned())]);
    let bad_unwanted = "b 1\nc{x=y} 3\n";
    let result = parse(bad_unwanted.as_bytes(), Format::PrometheusText, &Limits::default(), |n| n == "b");
    refused(result, bad_unwanted, "line 2, column 5: expected '\"' at start of label value");
}

#[test]
fn escapes_special_values_and_spacing() {
    let body = "m{a=\"q\\\"uote\",b=\"back\\\\slash\",c=\"new\\nline\", } +Inf\n\
                m { a = \"x\" }   NaN  \n\
                \t m -1.5e3\n\
                m{} -Inf\n\
                m{a=\"1\" b=\"2\"}3 -5\n\
                {\"gpu.utilization\", gpu=\"1\"} 7\n";
    let s = text(body).unwrap();
    assert_eq!(s[0].label("a"), Some("q\"uote"));
    assert_eq!(s[0].label("b"), Some("back\\slash"));
    assert_eq!(s[0].label("c"), Some("new\nline"));
    assert!(s[0].value.is_infinite() && s[0].value > 0.0);
    assert!(s[1].value.is_nan());
    assert_eq!(s[2].value, -1500.0);
    assert!(s[3].value.is_infinite() && s[3].value < 0.0);
    assert_eq!((s[4].label("b"), s[4].value, s[4].timestamp_ms), (Some("2"), 3.0, Some(-5)), "commas may be left out");
    assert_eq!((s[5].name.as_str(), s[5].label("gpu")), ("gpu.utilization", Some("1")));
}

#[test]
fn malformed_text_lines_fail_the_payload_with_position() {
    let cases: &[(&str, &str)] = &[
        ("m{a=\"x\"", "expected label name, found end of line"),
        ("m{a=x} 1", "expected '\"' at start of label value"),
        ("m{a=\"x\"}", "expected value after metric"),
        ("m{a=\"x\"} 1..2", "invalid value \"1..2\""),
        ("m 1 abc", "invalid timestamp \"abc\""),
        ("m 1 2.5", "invalid timestamp \"2.5\""),
        ("m 1 2 3", "unexpected '3' after sample"),
        ("m 1 # {a=\"b\"} 1", "invalid timestamp \"#\""),
        ("m 1\r", "invalid value \"1\\r\""),
        ("m{a=\"x\",a=\"y\"} 1", "duplicate label \"a\""),
        ("m{__name__=\"x\"} 1", "\"__name__\" is reserved"),
        ("m{a=\"\\q\"} 1", "invalid escape sequence '\\q'"),
        ("m{a=\"open} 1", "unterminated"),
        ("9m 1", "expected metric name, found '9'"),
        ("m{0a=\"x\"} 1", "expected label name"),
        ("m{,a=\"x\"} 1", "expected label name, found ','"),
        ("{a=\"x\"} 1", "metric name not set"),
        ("{\"a\",\"b\"} 1", "metric name given twice"),
        ("m 0x10", "invalid value"),
        ("m 1_000", "invalid value"),
        ("m 1e999", "invalid value"),
        ("# TYPE m wrongtype", "unknown metric type \"wrongtype\""),
        ("# TYPE m  gauge", "unknown metric type \" gauge\""),
        ("# TYPE m", "expected the type"),
        ("# TYPE 9m gauge", "expected metric name after TYPE"),
        ("# HELP m-x help", "invalid metric name in HELP line"),
        ("=1", "expected metric name"),
    ];
    for (body, needle) in cases {
        refused(text(body), body, needle);
    }
    match text("ok 1\nm{a=x} 1\n") {
        Err(Error::Syntax { line, column, .. }) => assert_eq!((line, column), (2, 5)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn text_comments_blank_lines_and_eof_are_skipped() {
    let s =
        text("\n# just a comment\n#\n# HELP m help with \"quotes\"\n\n#EOF\n# EOF\nm 1\n# HELP\n# UNIT m x\n").unwrap();
    assert_eq!(s.len(), 1, "'# EOF' ends nothing in the text format");
    let latin1 = b"# \xe9t\xe9\nm 1\n";
    assert_eq!(parse(latin1, Format::PrometheusText, &Limits::default(), |_| true).unwrap().len(), 1);
    assert_eq!(
        parse(b"m{a=\"\xe9\"} 1\n", Format::PrometheusText, &Limits::default(), |_| true),
        Err(Error::NotUtf8(5))
    );
    assert_eq!(text("m 1").unwrap().len(), 1, "a last line without its newline is read");
}

#[test]
fn text_family_rules_span_lines() {
    let cases: &[(&str, &str)] = &[
        ("# HELP m one\n# HELP m two\n", "line 2, column 1: second HELP line"),
        ("# TYPE m gauge\n# TYPE m counter\n", "second TYPE line"),
        ("m 1\n# TYPE m counter\n", "or TYPE after its samples"),
        ("# TYPE s summary\ns{quantile=\"x\"} 1\n", "expected float as value for 'quantile' label"),
        ("# TYPE h histogram\nh_bucket{le=\"0x1p-3\"} 1\n", "expected float as value for 'le' label"),
        ("# TYPE h histogram\nh_bucket{le=\"1\"} -1\n", "negative bucket population"),
        ("# TYPE h gauge_histogram\nh_count -2\n", "negative count"),
        ("# TYPE s summary\n# TYPE s_count counter\n", "second TYPE line"),
    ];
    for (body, needle) in cases {
        refused(text(body), body, needle);
    }
    // What the rules leave alone: a HELP without text, untyped `le`, a negative
    // summary count, a histogram's sum, families interleaved.
    let fine = "# HELP m\n# HELP m\n# HELP m x\nm{le=\"x\"} -1\n# TYPE s summary\ns_count -1\n\
                # TYPE h histogram\nh_sum -3\nother 1\nh_bucket{le=\"+Inf\"} 2\ns{quantile=\"0.5\"} 1\n";
    assert_eq!(text(fine).unwrap().len(), 6);
}

#[test]
fn openmetrics_pages_end_with_eof() {
    let body = "# TYPE gpu_utilization gauge\n# UNIT gpu_utilization_percent percent\n\
                gpu_utilization{gpu=\"0\"} 50 1700000000.5 # {trace_id=\"abc\"} 1.0\n\
                {\"gpu.utilization\",gpu=\"1\"} 7\n# EOF\n";
    let s = om(body).unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].timestamp_ms, Some(1_700_000_000_500));
    assert_eq!((s[1].name.as_str(), s[1].label("gpu")), ("gpu.utilization", Some("1")));
    assert_eq!(om("# EOF").unwrap(), vec![], "the final newline is optional");
    let truncated = "# TYPE a gauge\na 1\n";
    assert_eq!(om(truncated), Err(Error::MissingEof { lines: 2 }));
    assert_eq!(om(""), Err(Error::MissingEof { lines: 0 }));
    let cases: &[(&str, &str)] = &[
        ("a 1\n# EOF\ngarbage\n", "line 3, column 1: unexpected data after '# EOF'"),
        ("# EOF\n\n", "unexpected data after '# EOF'"),
        ("\na 1\n# EOF\n", "blank line"),
        (" a 1\n# EOF\n", "expected metric name, '{' or '#'"),
        ("# a comment\n# EOF\n", "expected HELP, TYPE, UNIT or EOF"),
        ("# TYPE a untyped\n# EOF\n", "unknown metric type \"untyped\""),
        ("# UNIT a_bytes seconds\n# EOF\n", "not a suffix"),
        ("# HELP a\n# EOF\n", "expected one space and text"),
        ("a{b=\"c\", d=\"e\"} 1\n# EOF\n", "expected label name, found ' '"),
        ("a{b=\"c\"d=\"e\"} 1\n# EOF\n", "expected ',' or '}' after label value"),
        ("a\t1\n# EOF\n", "expected one space and the value"),
        ("a 1 NaN\n# EOF\n", "invalid timestamp \"NaN\""),
        ("a 1 2 \n# EOF\n", "unexpected ' ' after timestamp"),
        ("a 1 # {b=\"c\"}\n# EOF\n", "expected one space and the exemplar value"),
        ("a 1 # {\"b\"} 1\n# EOF\n", "an exemplar has no metric name"),
        ("a 1 # {b=\"c\"} 1 -Inf\n# EOF\n", "invalid exemplar timestamp"),
    ];
    for (body, needle) in cases {
        refused(om(body), body, needle);
    }
    let escapes = om("a{b=\"x\\zy\\n\"} 1\n# EOF\n").unwrap();
    assert_eq!(escapes[0].label("b"), Some("x\\zy\n"), "unknown escapes are kept as written");
}

#[test]
fn a_payload_read_line_by_line_parses_as_the_whole() {
    let body = "# TYPE a gauge\na{x=\"1\"} 1\nb 2\n# EOF\n";
    let whole = om(body).unwrap();
    let mut parser = Parser::new(Format::OpenMetrics, Limits::default());
    let mut lines = Vec::new();
    for raw in body.strip_suffix('\n').unwrap().split('\n') {
        lines.extend(parser.line(raw.as_bytes(), |_| true).unwrap());
    }
    assert!(parser.ended());
    parser.finish().unwrap();
    assert_eq!(lines, whole);
    let mut cut = Parser::new(Format::OpenMetrics, Limits::default());
    cut.line(b"a 1", |_| true).unwrap();
    assert_eq!(cut.finish(), Err(Error::MissingEof { lines: 1 }));
    let mut text = Parser::new(Format::PrometheusText, Limits::default());
    text.line(b"a 1", |_| true).unwrap();
    text.finish().expect("a text payload has no terminator");
    assert!(!text.ended());
}

#[test]
fn limits_are_enforced() {
    let limits = Limits {
        max_bytes: 100,
        max_line_bytes: 30,
        max_samples: 2,
        max_labels: 2,
        max_label_value_bytes: 5,
        max_families: 3,
    };
    let p = |b: &str| parse(b.as_bytes(), Format::PrometheusText, &limits, |_| true);
    assert!(matches!(p(&"m 1\n".repeat(30)), Err(Error::TooLarge { size: 120, limit: 100 })));
    assert!(matches!(p(&format!("m{{a=\"{}\"}} 1", "x".repeat(40))), Err(Error::Limit { what: "line length", .. })));
    assert!(matches!(p("a 1\nb 1\nc 1\n"), Err(Error::Limit { line: 3, what: "sample count", .. })));
    assert!(matches!(p("m{a=\"1\",b=\"2\",c=\"3\"} 1"), Err(Error::Limit { what: "label count", .. })));
    assert!(matches!(p("m{a=\"123456\"} 1"), Err(Error::Limit { what: "label value length", .. })));
    assert!(matches!(
        p("# TYPE a gauge\n# TYPE b gauge\n# TYPE c gauge\n# TYPE d gauge\n"),
        Err(Error::Limit { line: 4, what: "metric family count", limit: 3 })
    ));
    assert!(matches!(parse(&[b'm', b' ', 0xff], Format::PrometheusText, &limits, |_| true), Err(Error::NotUtf8(2))));
    let mut streamed = Parser::new(Format::PrometheusText, limits);
    for _ in 0..25 {
        if let Err(e) = streamed.line(b"# a comment", |_| true) {
            assert_eq!(e, Error::TooLarge { size: 107, limit: 100 });
            return;
        }
    }
    panic!("a streamed payload past max_bytes was read");
}
