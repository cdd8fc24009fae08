//! `deploy/` on a real API server: every rendering (the base, each overlay, the base
//! with every component, the seed's examples) is accepted by `kubectl apply
//! --server-side`, except the objects of CRDs this cluster does not have
//! (prometheus-operator's and cert-manager's, which `scripts/check-deploy` validates
//! offline against their schemas); every ValidatingAdmissionPolicy type-checks with no
//! warning in its status.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use test_support::control_plane::ControlPlane;
use test_support::deploy::{kustomize, renders};
use test_support::simulated::{wait_until_ok, workspace};

/// API groups of CRDs not installed here.
const THIRD_PARTY: [&str; 2] = ["monitoring.coreos.com/", "cert-manager.io/"];

fn ours(docs: &[Value]) -> (String, Vec<String>) {
    let mut kept = String::new();
    let mut left_out = Vec::new();
    for doc in docs {
        let api = doc["apiVersion"].as_str().unwrap_or_default();
        if THIRD_PARTY.iter().any(|g| api.starts_with(g)) {
            left_out.push(format!("{} {}", doc["kind"].as_str().unwrap_or_default(), doc["metadata"]["name"]));
            continue;
        }
        kept.push_str("---\n");
        kept.push_str(&serde_json::to_string(doc).unwrap());
        kept.push('\n');
    }
    (kept, left_out)
}

#[test]
fn every_rendering_of_deploy_is_accepted_server_side_and_its_policies_type_check() {
    let cp = ControlPlane::start();
    let mut renderings = renders(&workspace());
    let (text, docs) = kustomize(&workspace().join("deploy/examples"));
    renderings.push(test_support::deploy::Render { name: "deploy/examples".into(), text, docs });
    for render in &renderings {
        let (yaml, left_out) = ours(&render.docs);
        // Server-side apply as a user runs it: one field manager, conflicts refused.
        let out = cp.run_with_input(&["apply", "--server-side", "--field-manager=kubectl", "-f", "-"], &yaml);
        assert!(
            out.status.success(),
            "{}: refused by the API server:\n{}",
            render.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("Warning"), "{}: warnings: {stderr}", render.name);
        if render.name.contains("prometheus-operator") || render.name.contains("cert-manager") {
            assert!(!left_out.is_empty(), "{}: its CRD objects were found and left out", render.name);
        }
    }

    let policies: Value = serde_json::from_str(&cp.run(&["get", "validatingadmissionpolicies", "-o", "json"])).unwrap();
    let names: Vec<String> = policies["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.len() >= 2, "deploy/ installs its admission policies: {names:?}");
    for name in &names {
        wait_until_ok(&format!("{name} type-checked without warnings"), Duration::from_secs(60), || {
            let p: Value = serde_json::from_str(&cp.run(&["get", "validatingadmissionpolicy", name, "-o", "json"]))
                .map_err(|e| e.to_string())?;
            let checked = p["status"]["observedGeneration"] == p["metadata"]["generation"];
            let warnings = &p["status"]["typeChecking"]["expressionWarnings"];
            match (checked, warnings.as_array().map(Vec::len).unwrap_or(0)) {
                (true, 0) => Ok(()),
                (true, _) => panic!("{name}: type-checking warnings: {warnings:#}"),
                (false, _) => Err(format!("not yet checked: {}", p["status"])),
            }
        });
    }
}
