//! Patch semantics as the API server applies them to the objects the health loop
//! writes: strategic merge (node conditions merged by `type`, other lists replaced,
//! `null` deletes) and JSON merge (every list replaced), and the managed fields of
//! `spec.unschedulable`.

use serde_json::{Value, json};

/// Applies a node patch: strategic merge (conditions merged by type, other lists
/// replaced, `null` deletes) or JSON merge (every list replaced).
pub fn apply_node_patch(node: &mut Value, patch: &Value, json_merge: bool, main: bool, manager: &str) {
    merge(node, patch, "", json_merge);
    if main && patch.pointer("/spec").and_then(|s| s.get("unschedulable")).is_some() {
        let entries = node["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
        let mut kept: Vec<Value> = entries
            .into_iter()
            .filter(|e| e["manager"] != manager && e.pointer("/fieldsV1/f:spec/f:unschedulable").is_none())
            .collect();
        kept.push(json!({
            "manager": manager, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:unschedulable": {}}}
        }));
        node["metadata"]["managedFields"] = Value::Array(kept);
    }
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
    fn a_cordon_is_owned_by_the_manager_that_wrote_it_last() {
        let mut node = gpu_node("n");
        apply_node_patch(&mut node, &json!({"spec": {"unschedulable": true}}), false, true, "kubectl-cordon");
        apply_node_patch(&mut node, &json!({"spec": {"unschedulable": true}}), false, true, "gpu-exporter-health");
        let managers: Vec<&str> = node["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["gpu-exporter-health"]);
        apply_node_patch(&mut node, &json!({"spec": {"unschedulable": null}}), false, true, "kubectl-uncordon");
        assert!(node["spec"].get("unschedulable").is_none(), "null deletes");
    }
}
