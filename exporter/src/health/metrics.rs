//! The health loop's metric families, rendered after the exporter's own through the
//! [`Section`] hook. The loop updates a [`HealthMetrics`] (`gpu-health`'s view) after
//! every check and every API call; a scrape reads it and never waits on the loop.

use std::time::UNIX_EPOCH;

use crate::exposition::{Encoder, Family, Kind, label_list, push_label};
use crate::render::{RenderContext, Section};

use gpu_health::policy::Health;
pub use gpu_health::view::{BreakerView, GpuHealth, HealthMetrics, HealthView};

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family { name, kind: Kind::Gauge, help, unit: None }
}

pub const GPU_HEALTHY: Family =
    gauge("gpu_health_gpu_healthy", "1 if the GPU passes every health check, 0 if a signal is seen on it.");
pub const GPU_SIGNAL: Family = gauge(
    "gpu_health_gpu_signal",
    "1 per health signal seen on the GPU in the last check; state is pending (debouncing) or confirmed.",
);
pub const NODE_HEALTHY: Family = gauge(
    "gpu_health_node_healthy",
    "1 if the health policy finds the node's GPUs healthy, 0 if unhealthy; absent before the first check.",
);
pub const NODE_REASON: Family = Family {
    name: "gpu_health_node_reason",
    kind: Kind::Info,
    help: "Why the node is unhealthy, one series per reason. Always 1.",
    unit: None,
};
pub const NODE_UNHEALTHY_SINCE: Family = Family {
    name: "gpu_health_node_unhealthy_since_timestamp_seconds",
    kind: Kind::Gauge,
    help: "Unix time at which the node became unhealthy.",
    unit: Some("seconds"),
};
pub const NODE_QUARANTINED: Family =
    gauge("gpu_health_node_quarantined", "1 while the health loop holds a cordon or taint on the node.");
pub const OPTED_OUT: Family =
    gauge("gpu_health_node_opted_out", "1 if the node carries the opt-out label and the loop changes nothing on it.");
pub const ACTIONS: Family = Family {
    name: "gpu_health_actions",
    kind: Kind::Counter,
    help: "Node actions taken: cordon, uncordon, taint, untaint, condition, event, dry_run, blocked, overridden.",
    unit: None,
};
pub const API_ERRORS: Family = Family {
    name: "gpu_health_api_errors",
    kind: Kind::Counter,
    help: "Failed Kubernetes API requests, every attempt, by operation and error (HTTP code or unreachable).",
    unit: None,
};
pub const CHECKS: Family =
    Family { name: "gpu_health_checks", kind: Kind::Counter, help: "Health checks run, by kind.", unit: None };
pub const BREAKER_OPEN: Family =
    gauge("gpu_health_breaker_open", "1 while the cluster-wide circuit breaker holds back this node's quarantine.");
pub const BREAKER_QUARANTINED: Family = gauge(
    "gpu_health_breaker_quarantined_nodes",
    "GPU nodes quarantined by the health loop cluster-wide, as last counted by this node.",
);
pub const BREAKER_LIMIT: Family =
    gauge("gpu_health_breaker_limit_nodes", "Most GPU nodes the health loop may quarantine at once, as last computed.");
pub const BREAKER_FLEET: Family = gauge(
    "gpu_health_breaker_gpu_nodes",
    "GPU nodes in the cluster (per the breaker's node selector), as last listed.",
);
pub const MODE: Family = Family {
    name: "gpu_health_mode",
    kind: Kind::Info,
    help: "How the health loop runs: mode enforce, condition_only or dry_run; api connected, unreachable, \
           report_only (no API server configured) or off (--kubernetes.api=off: report-only, the API is never \
           contacted). Always 1.",
    unit: None,
};

/// Every health family, in render order.
pub const ALL: &[Family] = &[
    GPU_HEALTHY,
    GPU_SIGNAL,
    NODE_HEALTHY,
    NODE_REASON,
    NODE_UNHEALTHY_SINCE,
    NODE_QUARANTINED,
    OPTED_OUT,
    ACTIONS,
    API_ERRORS,
    CHECKS,
    BREAKER_OPEN,
    BREAKER_QUARANTINED,
    BREAKER_LIMIT,
    BREAKER_FLEET,
    MODE,
];

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

fn with_constant_labels(mut labels: String, ctx: &RenderContext) -> String {
    for (name, value) in &ctx.extra_labels {
        if !labels.is_empty() {
            labels.push(',');
        }
        push_label(&mut labels, name, value);
    }
    labels
}

impl Section for HealthMetrics {
    fn generation(&self) -> u64 {
        HealthMetrics::generation(self)
    }

    fn render(&self, enc: &mut Encoder<'_>, ctx: &RenderContext) {
        render_view(&self.view(), enc, ctx);
    }
}

/// Writes the health families for `view`.
pub fn render_view(view: &HealthView, enc: &mut Encoder<'_>, ctx: &RenderContext) {
    let own = with_constant_labels(label_list(&[("node", &ctx.node)]), ctx);
    let gpu_labels: Vec<String> = view
        .gpus
        .iter()
        .map(|g| {
            let index = g.index.to_string();
            let base = label_list(&[("node", &ctx.node), ("gpu", &index), ("uuid", &g.uuid), ("model", &g.model)]);
            with_constant_labels(base, ctx)
        })
        .collect();
    let known = view.health != Health::Unknown;
    enc.family(&GPU_HEALTHY);
    if known {
        for (g, l) in view.gpus.iter().zip(&gpu_labels) {
            enc.sample(l, &[], flag(g.signals.is_empty()));
        }
    }
    enc.family(&GPU_SIGNAL);
    for (g, l) in view.gpus.iter().zip(&gpu_labels) {
        for (signal, confirmed) in &g.signals {
            let state = if *confirmed { "confirmed" } else { "pending" };
            enc.sample(l, &[("signal", signal), ("state", state)], 1.0);
        }
    }
    enc.family(&NODE_HEALTHY);
    if known {
        enc.sample(&own, &[], flag(view.health == Health::Healthy));
    }
    enc.family(&NODE_REASON);
    for r in &view.reasons {
        let gpu = r.gpu.map(|g| g.to_string()).unwrap_or_default();
        let needs = match r.needs {
            super::policy::Needs::Nothing => "nothing",
            super::policy::Needs::Reset => "reset",
            super::policy::Needs::Reboot => "reboot",
        };
        enc.sample(&own, &[("gpu", &gpu), ("reason", &r.code), ("needs", needs)], 1.0);
    }
    enc.family(&NODE_UNHEALTHY_SINCE);
    if let Some(t) = view.since {
        enc.sample(&own, &[], t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
    }
    enc.family(&NODE_QUARANTINED);
    enc.sample(&own, &[], flag(view.quarantined));
    enc.family(&OPTED_OUT);
    enc.sample(&own, &[], flag(view.opted_out));
    enc.family(&ACTIONS);
    for (action, count) in &view.actions {
        enc.sample(&own, &[("action", action)], *count as f64);
    }
    enc.family(&API_ERRORS);
    for ((op, error), count) in &view.api_errors {
        enc.sample(&own, &[("operation", op), ("error", error)], *count as f64);
    }
    enc.family(&CHECKS);
    for (kind, count) in &view.checks {
        enc.sample(&own, &[("kind", kind)], *count as f64);
    }
    if let Some(b) = view.breaker {
        enc.family(&BREAKER_OPEN);
        enc.sample(&own, &[], flag(b.open));
        enc.family(&BREAKER_QUARANTINED);
        enc.sample(&own, &[], b.quarantined as f64);
        enc.family(&BREAKER_LIMIT);
        enc.sample(&own, &[], b.limit as f64);
        enc.family(&BREAKER_FLEET);
        enc.sample(&own, &[], b.fleet as f64);
    }
    enc.family(&MODE);
    enc.sample(&own, &[("mode", view.mode), ("api", view.api)], 1.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Format;
    use gpu_health::policy::{Needs, Reason};

    fn render(view: &HealthView) -> String {
        let mut out = String::new();
        let ctx = RenderContext {
            node: "gpu-1".into(),
            extra_labels: vec![("cluster".into(), "prod".into())],
            ..RenderContext::default()
        };
        let mut enc = Encoder::new(&mut out, Format::PrometheusText);
        render_view(view, &mut enc, &ctx);
        enc.finish();
        out
    }

    #[test]
    fn an_unhealthy_node_shows_its_reasons_signals_and_breaker() {
        let mut view = HealthView {
            health: Health::Unhealthy,
            since: Some(UNIX_EPOCH + std::time::Duration::from_secs(100)),
            reasons: vec![Reason {
                gpu: Some(0),
                uuid: "GPU-a".into(),
                code: "Xid79".into(),
                detail: "d".into(),
                needs: Needs::Reset,
                first_seen: None,
            }],
            gpus: vec![GpuHealth {
                index: 0,
                uuid: "GPU-a".into(),
                model: "H100".into(),
                signals: vec![("GpuLost".into(), true)],
            }],
            quarantined: true,
            breaker: Some(BreakerView { open: false, quarantined: 1, limit: 2, fleet: 20 }),
            ..HealthView::default()
        };
        view.actions.insert("cordon", 1);
        let text = render(&view);
        assert!(
            text.contains(
                "gpu_health_gpu_healthy{node=\"gpu-1\",gpu=\"0\",uuid=\"GPU-a\",model=\"H100\",cluster=\"prod\"} 0\n"
            ),
            "{text}"
        );
        assert!(text.contains("signal=\"GpuLost\",state=\"confirmed\"} 1\n"), "{text}");
        assert!(text.contains("gpu_health_node_healthy{node=\"gpu-1\",cluster=\"prod\"} 0\n"), "{text}");
        assert!(text.contains("gpu_health_node_reason_info{node=\"gpu-1\",cluster=\"prod\",gpu=\"0\",reason=\"Xid79\",needs=\"reset\"} 1\n"), "{text}");
        assert!(
            text.contains("gpu_health_actions_total{node=\"gpu-1\",cluster=\"prod\",action=\"cordon\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("gpu_health_breaker_limit_nodes{node=\"gpu-1\",cluster=\"prod\"} 2\n"), "{text}");
        assert!(
            text.contains("gpu_health_node_unhealthy_since_timestamp_seconds{node=\"gpu-1\",cluster=\"prod\"} 100\n")
        );
        assert!(text.contains(
            "gpu_health_mode_info{node=\"gpu-1\",cluster=\"prod\",mode=\"enforce\",api=\"report_only\"} 1\n"
        ));
    }

    #[test]
    fn nothing_is_called_healthy_before_the_first_check() {
        let view = HealthView { gpus: vec![GpuHealth { index: 0, ..GpuHealth::default() }], ..HealthView::default() };
        let text = render(&view);
        assert!(!text.contains("gpu_health_node_healthy{"), "{text}");
        assert!(!text.contains("gpu_health_gpu_healthy{"), "{text}");
        assert!(!text.contains("gpu_health_breaker_open"), "no breaker asked yet");
    }

    #[test]
    fn a_section_changes_generation_on_update() {
        let m = HealthMetrics::default();
        let g = m.generation();
        m.update(|v| v.opted_out = true);
        assert!(m.generation() > g);
        assert!(m.view().opted_out);
    }
}
