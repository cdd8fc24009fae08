//! The part of Go's `text/template` that prometheus-adapter's configuration uses, with its
//! `<<` and `>>` delimiters: text, `<<.Field>>` (and `.Map.key`), variables (`$`, `$x :=`),
//! pipelines (`|`), string and integer literals, `if`/`else if`/`else`, `range` (with
//! `$i, $v :=`), `with`, comments, the trim markers `<<-` and `->>`, and the built-in
//! functions `index`, `len`, `print`, `printf`, `println`, `eq`, `ne`, `not`, `and`, `or`.
//! Values print as Go prints them (`[a b]` for a slice, `map[k:v]` for a map, `<no value>`
//! for a missing map key).
//!
//! Unlike Go, every field and function is checked when the template is parsed, against
//! the fields the template will be given ([`Schema`]): a misspelt `<<.Seris>>` is refused
//! at start with its position instead of failing every query later. Anything outside this
//! subset (`define`, `template`, `block`, other functions) is refused the same way.

mod check;
mod exec;
mod parse;

use std::collections::BTreeMap;

pub use exec::go_quote;

/// The fields a template is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// `metricsQuery`: `.Series`, `.LabelMatchers`, `.GroupBy` (strings), `.GroupBySlice`
    /// (a slice), `.LabelValuesByName` (a map).
    Query,
    /// `resources.template`: `.Group`, `.Resource` (strings).
    Resource,
}

impl Schema {
    pub(super) fn fields(self) -> &'static [(&'static str, Ty)] {
        match self {
            Schema::Query => &[
                ("Series", Ty::Str),
                ("LabelMatchers", Ty::Str),
                ("LabelValuesByName", Ty::Map),
                ("GroupBy", Ty::Str),
                ("GroupBySlice", Ty::List),
            ],
            Schema::Resource => &[("Group", Ty::Str), ("Resource", Ty::Str)],
        }
    }

    pub(super) fn field(self, name: &str) -> Option<Ty> {
        self.fields().iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    pub(super) fn known(self) -> String {
        self.fields().iter().map(|(n, _)| format!(".{n}")).collect::<Vec<_>>().join(", ")
    }
}

/// The values a template is rendered with; fields the schema does not have are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Data {
    /// String fields.
    pub strings: BTreeMap<&'static str, String>,
    /// Slice fields.
    pub lists: BTreeMap<&'static str, Vec<String>>,
    /// Map fields.
    pub maps: BTreeMap<&'static str, BTreeMap<String, String>>,
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("template {template:?}: at byte {offset}: {reason}")]
pub struct Error {
    /// The template text.
    pub template: String,
    /// Byte offset in it.
    pub offset: usize,
    /// Why.
    pub reason: String,
}

/// A parsed, checked template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    nodes: Vec<Node>,
    fields: Vec<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    Str,
    List,
    Map,
    Int,
    Bool,
    /// The data the template is given (its schema's fields).
    Root,
    /// Anything (`and`, `or`).
    Any,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Text(String),
    Print(Pipeline),
    Assign(String, Pipeline),
    If(Pipeline, Vec<Node>, Vec<Node>),
    With(Pipeline, Vec<Node>, Vec<Node>),
    Range { key: Option<String>, value: Option<String>, pipe: Pipeline, body: Vec<Node>, empty: Vec<Node> },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pipeline(pub(super) Vec<Command>);

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Command {
    Arg(Arg),
    Call(Func, Vec<Arg>),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Arg {
    /// `.` then fields (`.` alone when empty).
    Dot(Vec<String>),
    /// `$name` then fields.
    Var(String, Vec<String>),
    Str(String),
    Int(i64),
    Bool(bool),
    Paren(Box<Pipeline>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Func {
    Index,
    Len,
    Print,
    Printf,
    Println,
    Eq,
    Ne,
    Not,
    And,
    Or,
}

pub(super) const FUNCS: [(&str, Func); 10] = [
    ("index", Func::Index),
    ("len", Func::Len),
    ("print", Func::Print),
    ("printf", Func::Printf),
    ("println", Func::Println),
    ("eq", Func::Eq),
    ("ne", Func::Ne),
    ("not", Func::Not),
    ("and", Func::And),
    ("or", Func::Or),
];

/// Go's other built-ins and actions, refused with a clear word.
pub(super) const UNSUPPORTED: [&str; 14] = [
    "call", "html", "js", "urlquery", "slice", "lt", "le", "gt", "ge", "define", "template", "block", "break",
    "continue",
];

impl Template {
    /// Parses and checks `text` against `schema`.
    pub fn parse(text: &str, schema: Schema) -> Result<Self, Error> {
        let fail = |offset: usize, reason: String| Error { template: text.to_owned(), offset, reason };
        let actions = parse::split(text).map_err(|(o, r)| fail(o, r))?;
        let mut parser = parse::Parser::new(actions);
        let (nodes, end) = parser.block().map_err(|(o, r)| fail(o, r))?;
        if let Some((offset, word)) = end {
            return Err(fail(offset, format!("unexpected {{{{{word}}}}} without a matching if, range or with")));
        }
        let mut fields = check::check(schema, &nodes).map_err(|r| fail(0, r))?;
        fields.sort_unstable();
        fields.dedup();
        Ok(Self { nodes, fields })
    }

    /// Whether the template reads field `name` (`LabelValuesByName`, ...).
    pub fn uses(&self, name: &str) -> bool {
        self.fields.contains(&name)
    }

    /// Renders with `data`.
    pub fn render(&self, data: &Data) -> String {
        exec::render(&self.nodes, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query_data() -> Data {
        let mut d = Data::default();
        d.strings.insert("Series", "http_requests_total".into());
        d.strings.insert("LabelMatchers", r#"namespace="ai",pod=~"a|b""#.into());
        d.strings.insert("GroupBy", "pod".into());
        d.lists.insert("GroupBySlice", vec!["pod".into(), "container".into()]);
        d.maps.insert("LabelValuesByName", [("namespace".into(), "ai".into()), ("pod".into(), "a|b".into())].into());
        d
    }

    fn render(t: &str) -> String {
        Template::parse(t, Schema::Query).unwrap_or_else(|e| panic!("{e}")).render(&query_data())
    }

    fn refused(t: &str) -> String {
        Template::parse(t, Schema::Query).unwrap_err().to_string()
    }

    #[test]
    fn renders_the_documented_queries() {
        assert_eq!(
            render("sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)"),
            r#"sum(rate(http_requests_total{namespace="ai",pod=~"a|b"}[2m])) by (pod)"#
        );
        assert_eq!(
            render("x{<<.LabelMatchers>>,container!=\"POD\"}"),
            r#"x{namespace="ai",pod=~"a|b",container!="POD"}"#
        );
        assert_eq!(render(r#"<<index .LabelValuesByName "namespace">>"#), "ai");
        assert_eq!(render(r#"<<.LabelValuesByName.pod>>"#), "a|b");
        assert_eq!(render(r#"<<.LabelValuesByName.nope>>|<<index .LabelValuesByName "nope">>|"#), "<no value>||");
        assert_eq!(
            render("<<.GroupBySlice>> <<index .GroupBySlice 1>> <<len .GroupBySlice>>"),
            "[pod container] container 2"
        );
        assert_eq!(render("<<range $i, $l := .GroupBySlice>><<if $i>>,<<end>><<$l>><<end>>"), "pod,container");
        assert_eq!(render("<<range .GroupBySlice>>[<<.>>]<<else>>none<<end>>"), "[pod][container]");
        assert_eq!(render(r#"<<if eq .GroupBy "pod">>p<<else if eq .GroupBy "x">>x<<else>>o<<end>>"#), "p");
        assert_eq!(render(r#"<<if ne .GroupBy "pod">>p<<else if eq .GroupBy "pod">>y<<end>>"#), "y");
        assert_eq!(render(r#"<<with .GroupBy>>by (<<.>>)<<end>>"#), "by (pod)");
        assert_eq!(
            render(r#"<<printf "%s{%s}" .Series .LabelMatchers>>"#),
            r#"http_requests_total{namespace="ai",pod=~"a|b"}"#
        );
        assert_eq!(render(r#"<<.Series | printf "%q">>"#), r#""http_requests_total""#);
        assert_eq!(render("a  <<- .GroupBy ->>  b <</* note */>>c"), "apodb c");
        assert_eq!(render("<<$s := .Series>><<$s>>:<<$.GroupBy>>"), "http_requests_total:pod");
        assert_eq!(render(r#"<<if and .Series (not .GroupBy)>>1<<else>>0<<end>><<or "" "d">>"#), "0d");
        assert_eq!(render(r#"<<print "a" 1 2 "b">>"#), "a1 2b");
        assert_eq!(render(r#"<<">>">>"#), ">>");
        assert_eq!(render("no actions at all"), "no actions at all");
    }

    #[test]
    fn resource_templates() {
        let t = Template::parse("kube_<<.Group>>_<<.Resource>>", Schema::Resource).unwrap();
        let mut d = Data::default();
        d.strings.insert("Group", "apps".into());
        d.strings.insert("Resource", "deployment".into());
        assert_eq!(t.render(&d), "kube_apps_deployment");
        assert!(t.uses("Group") && t.uses("Resource") && !t.uses("Series"));
        let e = Template::parse("<<.Series>>", Schema::Resource).unwrap_err().to_string();
        assert!(e.contains("unknown field .Series") && e.contains(".Group, .Resource"), "{e}");
    }

    #[test]
    fn mistakes_are_refused_at_parse_time() {
        let e = refused("sum(<<.Seris>>{<<.LabelMatchers>>})");
        assert!(e.contains("unknown field .Seris") && e.contains(".Series, .LabelMatchers"), "{e}");
        assert!(refused("<<.Series.Name>>").contains("can't evaluate field Name in a string"));
        assert!(refused("<<range .GroupBySlice>><<.Name>><<end>>").contains("can't evaluate field Name in a string"));
        assert!(refused("<<join .GroupBySlice \",\">>").contains("function \"join\" is not defined"));
        assert!(refused("<<html .Series>>").contains("not supported"));
        assert!(refused("<<template \"x\">>").contains("not supported"));
        assert!(refused("<<.Series").contains("unclosed action"));
        assert!(refused("<<if .Series>>x").contains("without end"));
        assert!(refused("x<<end>>").contains("without a matching"));
        assert!(refused("<<$x>>").contains("undefined variable $x"));
        assert!(refused("<<range .Series>><<end>>").contains("range over a string"));
        assert!(refused("<<index .Series 1>>").contains("can't index a string"));
        assert!(refused("<<len>>").contains("len takes one argument"));
        assert!(refused("<<\"a>>").contains("unterminated"));
        assert!(refused("<<>>").contains("missing value"));
        let e = Template::parse("ok <<.Nope>>", Schema::Query).unwrap_err();
        assert_eq!(e.template, "ok <<.Nope>>");
    }

    #[test]
    fn uses_reports_the_fields_read() {
        let t = Template::parse("<<.Series>>{<<.LabelMatchers>>}", Schema::Query).unwrap();
        assert!(t.uses("Series") && !t.uses("LabelValuesByName"));
        let t = Template::parse("<<range $k, $v := .LabelValuesByName>><<$k>><<end>>", Schema::Query).unwrap();
        assert!(t.uses("LabelValuesByName"));
    }

    #[test]
    fn quoting_follows_go() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("x\ny\u{1}"), r#""x\ny\x01""#);
        assert_eq!(go_quote("pod-0"), r#""pod-0""#);
    }
}
