//! `docs/health.md` and `deploy/base/health/` say what the code does: the XID table, the
//! metric families, the flags, and the names the admission policy and RBAC allow.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use clap::CommandFactory as _;
use gpu_exporter::config::Args;
use gpu_exporter::health::metrics;
use gpu_health::names::{BreakerSettings, Names};
use gpu_health::xid::{DEFAULT_TABLE, UNUSED_CODES};

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::read_to_string(root.join(path)).unwrap()
}

#[test]
fn the_xid_table_is_documented_as_shipped() {
    let doc = read("docs/health.md");
    for e in DEFAULT_TABLE {
        let row = format!("| {} | `{}` | {} | {} | {} |", e.code, e.mnemonic, e.nvidia, e.class, e.meaning);
        assert!(doc.contains(&row), "docs/health.md lacks the row {row}");
    }
    // The paragraph of unused codes names exactly those the code records only.
    let start = doc.find("marks *unused* on those GPUs:").expect("the paragraph of unused codes");
    let text = &doc[start..start + doc[start..].find("They, and").unwrap()];
    let mut named = Vec::new();
    for part in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .map(|p| p.trim_end_matches('.'))
        .filter(|p| p.starts_with(|c: char| c.is_ascii_digit()))
    {
        match part.split_once('-') {
            Some((a, b)) => named.extend(a.parse::<u64>().unwrap()..=b.parse::<u64>().unwrap()),
            None => named.push(part.parse::<u64>().unwrap()),
        }
    }
    assert_eq!(named, UNUSED_CODES, "docs/health.md's unused XIDs");
}

#[test]
fn every_health_family_is_documented() {
    let doc = read("docs/health.md");
    for family in metrics::ALL {
        let name = family.sample_name();
        assert!(doc.contains(&format!("| `{name}` |")), "docs/health.md lacks {name}");
    }
}

#[test]
fn every_health_flag_is_documented_with_its_variable() {
    let doc = read("docs/health.md");
    let command = Args::command();
    let flags: Vec<_> =
        command.get_arguments().filter(|a| a.get_long().is_some_and(|l| l.starts_with("health."))).collect();
    assert!(flags.len() > 15);
    for arg in flags {
        let long = arg.get_long().unwrap();
        let env = arg.get_env().unwrap().to_str().unwrap();
        let row = format!("| `--{long}` | `{env}` |");
        assert!(doc.contains(&row), "docs/health.md lacks the row {row}");
    }
}

#[test]
fn the_deploy_files_allow_exactly_the_names_the_loop_writes() {
    let names = Names::new("gpu-telemetry.io");
    let policy = read("deploy/base/health/admission-policy.yaml");
    for name in [&names.taint_key, &names.state_annotation, &names.dry_run_annotation, &names.condition_type] {
        assert!(policy.contains(&format!("'{name}'")), "the admission policy does not name {name}");
    }
    assert!(
        !policy.contains(&format!("'{}'", names.reset_annotation)),
        "the operator's reset annotation is theirs, not the exporter's"
    );
    let breaker = BreakerSettings {
        max_fraction: 0.1,
        max_nodes: None,
        node_selector: String::new(),
        config_map: "gpu-health-breaker".into(),
        grace: std::time::Duration::from_secs(300),
        max_gpu_fraction: 0.1,
        max_gpus: None,
        gpu_count_label: "nvidia.com/gpu.count".into(),
    };
    let rbac = read("deploy/base/health/rbac.yaml");
    assert!(policy.contains(&format!("'{}'", breaker.config_map)));
    let args = <Args as clap::Parser>::try_parse_from(["gpu-exporter"]).unwrap();
    assert_eq!(args.health.breaker_config_map, breaker.config_map);
    assert_eq!(args.health.domain, names.domain);
    assert!(policy.contains("authentication.kubernetes.io/node-name"));
    // Device taints: the owner label and node annotation the rules carry, the resource,
    // the GPU breaker's ConfigMap.
    for name in [&names.rule_node_key, &names.managed_by] {
        assert!(policy.contains(&format!("'{name}'")), "the admission policy does not name {name}");
    }
    assert!(policy.contains("'app.kubernetes.io/managed-by'"));
    assert!(policy.contains(&format!("'{}'", breaker.gpu_config_map())));
    assert!(rbac.contains(&format!("[\"{}\", \"{}\"]", breaker.config_map, breaker.gpu_config_map())), "{rbac}");
    assert!(rbac.contains("resources: [\"devicetaintrules\"]"));
    for version in gpu_health_kube::device_rules::RuleVersion::PREFERRED {
        assert!(
            policy.contains(&format!("\"{}\"", version.as_str())),
            "the policy does not match {}",
            version.as_str()
        );
    }
}
