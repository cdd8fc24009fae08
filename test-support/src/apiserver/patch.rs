//! Patch semantics as the API server applies them to the objects the health loop
//! writes: strategic merge (node conditions merged by `type`, other lists replaced,
//! `null` deletes) and JSON merge (every list replaced), and the managed fields of
//! `spec.unschedulable` by the real server's rule for an update (checked on
//! kube-apiserver 1.37 by `real-cluster/tests/health.rs` and by hand):
//!
//! - a write that changes the field gives it to the writer's manager, and takes it from
//!   every other manager's entry (an entry left with nothing is dropped; one that owns
//!   other fields stays);
//! - a write that leaves the value as it was changes no ownership (`true` written over
//!   `true` leaves the cordon with whoever set it);
//! - a write that removes it (`null`, or `false`, which a Node never stores) leaves it
//!   to no one.

use serde_json::{Map, Value, json};

/// Applies a node patch: strategic merge (conditions merged by type, other lists
/// replaced, `null` deletes) or JSON merge (every list replaced); `main` is a write to
/// the Node itself (not `/status`), by field manager `manager`.
pub fn apply_node_patch(node: &mut Value, patch: &Value, json_merge: bool, main: bool, manager: &str) {
    let before = node.pointer("/spec/unschedulable").cloned();
    merge(node, patch, "", json_merge);
    if let Some(spec) = node.get_mut("spec").and_then(Value::as_object_mut)
        && spec.get("unschedulable") == Some(&Value::Bool(false))
    {
        spec.remove("unschedulable");
    }
    let after = node.pointer("/spec/unschedulable").cloned();
    if !main || before == after {
        return;
    }
    let mut entries: Vec<Value> = node["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    for entry in &mut entries {
        if let Some(spec) = entry.pointer_mut("/fieldsV1/f:spec").and_then(Value::as_object_mut) {
            spec.remove("f:unschedulable");
            if spec.is_empty()
                && let Some(fields) = entry["fieldsV1"].as_object_mut()
            {
                fields.remove("f:spec");
            }
        }
    }
    entries.retain(|e| e["fieldsV1"].as_object().is_some_and(|f| !f.is_empty()));
    if after.is_some() {
        let mine = entries
            .iter_mut()
            .find(|e| e["manager"] == manager && e["operation"] == "Update" && e.get("subresource").is_none());
        match mine {
            Some(entry) => {
                let fields = entry["fieldsV1"].as_object_mut().expect("kept entries have fields");
                let spec = fields.entry("f:spec").or_insert_with(|| Value::Object(Map::new()));
                spec["f:unschedulable"] = json!({});
            }
            None => entries.push(json!({
                "manager": manager, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:unschedulable": {}}}
            })),
        }
    }
    node["metadata"]["managedFields"] = Value::Array(entries);
}

pub(crate) fn merge(target: &mut Value, patch: &Value, path: &str, json_merge: bool) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        let sub = format!("{path}/{k}");
        if v.is_null() {
            t.remove(k);
        } else if !json_merge && sub == "/status/conditions" && v.is_array() {
            let list = t.entry(k.clone()).or_insert_with(|| json!([]));
            for item in v.as_array().unwrap() {
                let arr = list.as_array_mut().unwrap();
                match arr.iter_mut().find(|c| c["type"] == item["type"]) {
                    Some(existing) => merge(existing, item, &format!("{sub}/item"), false),
                    None => arr.push(item.clone()),
                }
            }
        } else if v.is_object() && t.get(k).is_some_and(Value::is_object) {
            merge(t.get_mut(k).unwrap(), v, &sub, json_merge);
        } else {
            t.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::registered_node as gpu_node;

    #[test]
    fn strategic_merge_keeps_other_conditions_and_json_merge_replaces_the_list() {
        let mut node = gpu_node("n");
        merge(&mut node, &json!({"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}}), "", false);
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 3, "strategic merge keeps the others");
        merge(&mut node, &json!({"status": {"conditions": [{"type": "GPUHealthy", "status": "True"}]}}), "", true);
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 1, "JSON merge replaces the list");
    }

    #[test]
    fn a_cordon_belongs_to_whoever_changed_it_as_on_the_real_server() {
        let managers = |node: &Value| -> Vec<String> {
            node["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e.pointer("/fieldsV1/f:spec/f:unschedulable").is_some())
                .map(|e| e["manager"].as_str().unwrap().to_string())
                .collect()
        };
        let mut node = gpu_node("n");
        // The loop writes its annotation and its cordon.
        apply_node_patch(
            &mut node,
            &json!({"metadata": {"annotations": {"a": "1"}}, "spec": {"unschedulable": true}}),
            false,
            true,
            "gpu-exporter-health",
        );
        assert_eq!(managers(&node), ["gpu-exporter-health"]);
        // An admin writing the same value takes nothing.
        apply_node_patch(&mut node, &json!({"spec": {"unschedulable": true}}), false, true, "kubectl");
        assert_eq!(managers(&node), ["gpu-exporter-health"]);
        // An uncordon leaves the field to no one; `false` is not stored.
        apply_node_patch(&mut node, &json!({"spec": {"unschedulable": false}}), false, true, "kubectl");
        assert!(node["spec"].get("unschedulable").is_none(), "false is not stored");
        assert!(managers(&node).is_empty());
        // The admin's cordon is the admin's.
        apply_node_patch(&mut node, &json!({"spec": {"unschedulable": true}}), false, true, "kubectl");
        assert_eq!(managers(&node), ["kubectl"]);
        apply_node_patch(&mut node, &json!({"spec": {"unschedulable": null}}), false, true, "kubectl");
        assert!(node["spec"].get("unschedulable").is_none(), "null deletes");
        assert!(managers(&node).is_empty());
    }
}
