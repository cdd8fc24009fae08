//! Writes a [`Report`] in the chosen format: the table (plain or `-o wide`), or the
//! report's document as JSON or YAML (`serde_yaml_ng`). Warnings are not part of a
//! table's text: the edge writes them to stderr as kubectl does (`Warning: ...`); the
//! JSON and YAML documents carry them in `warnings`.

use crate::views::Report;

/// `-o` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Wide,
    Json,
    Yaml,
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("writing JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("writing YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
}

pub type Result<T, E = OutputError> = std::result::Result<T, E>;

/// The text of `report` in `format` (`None`: the plain table). `summary` lines follow a
/// table (the cost summary), then the report's trailer (the node plan).
pub fn render(report: &Report, format: Option<Format>, colour: bool) -> Result<String> {
    match format {
        None | Some(Format::Wide) => {
            let mut text = report.table.render(format == Some(Format::Wide), colour);
            if report.table.rows.is_empty() && report.table.footer.is_empty() {
                text = String::from("No GPU resources found.\n");
            }
            if let Some(summary) = report.extra.get("summary").and_then(|s| s.as_str()) {
                text.push('\n');
                text.push_str(&crate::sanitize::lines(summary));
                text.push('\n');
            }
            if !report.trailer.is_empty() {
                text.push('\n');
                text.push_str(&crate::sanitize::lines(&report.trailer));
            }
            Ok(text)
        }
        Some(Format::Json) => {
            let mut text = serde_json::to_string_pretty(&report.document())?;
            text.push('\n');
            Ok(text)
        }
        Some(Format::Yaml) => Ok(serde_yaml_ng::to_string(&report.document())?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Cell, Column, Table};
    use serde_json::json;

    fn report() -> Report {
        Report {
            kind: "GPUNodeList",
            table: Table { columns: vec![Column::text("NODE")], rows: vec![vec![Cell::text("n1")]], footer: vec![] },
            items: vec![json!({"name": "n1", "utilizationPercent": null})],
            warnings: vec!["node n2: exporter timed out; its readings are unknown".into()],
            ..Report::default()
        }
    }

    #[test]
    fn every_format_writes_the_same_records() {
        let r = report();
        assert_eq!(render(&r, None, false).unwrap(), "NODE\nn1\n");
        let json: serde_json::Value = serde_json::from_str(&render(&r, Some(Format::Json), false).unwrap()).unwrap();
        assert_eq!(json["kind"], "GPUNodeList");
        assert_eq!(json["items"][0]["utilizationPercent"], serde_json::Value::Null, "unknown is null, not 0");
        assert_eq!(json["warnings"][0], "node n2: exporter timed out; its readings are unknown");
        let yaml = render(&r, Some(Format::Yaml), false).unwrap();
        let back: serde_json::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(back, json);
        let empty = Report { kind: "GPUList", ..Report::default() };
        assert_eq!(render(&empty, None, false).unwrap(), "No GPU resources found.\n");
    }
}
