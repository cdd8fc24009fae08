//! What each command shows, built from a [`Fleet`] without I/O: a table (for the
//! terminal) and, row for row, the same records as JSON values (for `-o json|yaml`),
//! plus warnings that say what was left out (nodes whose exporter did not answer,
//! models without a price).
//!
//! JSON field names are camelCase, as Kubernetes writes its objects, and carry their
//! unit (`memoryUsedBytes`, `powerWatts`, `dollarsPerHour`); a figure that could not be
//! read is `null`, never `0`.

pub mod cost;
pub mod gpus;
pub mod health;
pub mod nodes;
pub mod pods;
pub mod rightsize;

use serde_json::{Map, Value, json};

use crate::fleet::Fleet;
use crate::table::{Table, TableError};

/// One command's output, before it is written in a format.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// `GPUNodeList`, `GPUList`, `GPUPodList`, `GPUCostList`.
    pub kind: &'static str,
    pub table: Table,
    /// One per table row, in the same order.
    pub items: Vec<Value>,
    /// More top-level fields of the JSON document (totals, unpriced models, ...).
    pub extra: Map<String, Value>,
    pub warnings: Vec<String>,
    /// Text a table is followed by, not part of the JSON document (the node plan of
    /// `rightsize --plan`, which the document carries as data).
    pub trailer: String,
}

impl Report {
    /// Sorts rows (and items with them) by a column; `-name` sorts descending.
    pub fn sort(&mut self, by: &str) -> Result<(), TableError> {
        let order = self.table.sort_order(by)?;
        let rows = std::mem::take(&mut self.table.rows);
        let items = std::mem::take(&mut self.items);
        let mut rows: Vec<Option<_>> = rows.into_iter().map(Some).collect();
        let mut items: Vec<Option<_>> = items.into_iter().map(Some).collect();
        for i in order {
            if let Some(row) = rows.get_mut(i).and_then(Option::take) {
                self.table.rows.push(row);
            }
            if let Some(item) = items.get_mut(i).and_then(Option::take) {
                self.items.push(item);
            }
        }
        Ok(())
    }

    /// The JSON document `-o json|yaml` writes.
    pub fn document(&self) -> Value {
        let mut doc = Map::new();
        doc.insert("kind".into(), json!(self.kind));
        doc.insert("items".into(), Value::Array(self.items.clone()));
        for (k, v) in &self.extra {
            doc.insert(k.clone(), v.clone());
        }
        doc.insert("warnings".into(), json!(self.warnings));
        Value::Object(doc)
    }
}

/// One warning per node whose exporter gave no readings.
pub fn unknown_warnings(fleet: &Fleet) -> Vec<String> {
    fleet
        .unknown_nodes()
        .into_iter()
        .map(|(node, reason, detail)| {
            let detail = if detail.is_empty() { String::new() } else { format!(" ({detail})") };
            format!("node {node}: exporter {}{detail}; its readings are unknown", reason.as_str())
        })
        .collect()
}

/// `null` for a missing figure; a whole number is written without a fraction
/// (`85899345920`, not `85899345920.0`).
pub fn opt(v: Option<f64>) -> Value {
    v.map_or(Value::Null, num)
}

/// A figure as JSON.
pub fn num(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 { json!(v as i64) } else { json!(v) }
}
