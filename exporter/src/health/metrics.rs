//! The health loop's metric families, rendered after the exporter's own through the
//! [`Section`] hook, by the same encoder (prometheus-client by default). The loop
//! updates a [`HealthMetrics`] (`gpu-health`'s view) after every check and every API
//! call; a scrape reads it and never waits on the loop.

use std::time::UNIX_EPOCH;

use crate::exposition::Family;
use crate::render::labels::LabelSet;
use crate::render::sink::Exposition;
use crate::render::{RenderContext, Section, device_label_set, own_label_set};

use gpu_health::verdict::{Health, Needs};
pub use gpu_health::view::{BreakerView, GpuHealth, HealthMetrics, HealthView};

pub const GPU_HEALTHY: Family = Family::gauge(
    "gpu_health_gpu_healthy",
    None,
    "1 if the GPU passes every health check, 0 if a signal is seen on it.",
);
pub const GPU_SIGNAL: Family = Family::gauge(
    "gpu_health_gpu_signal",
    None,
    "1 per health signal seen on the GPU in the last check; state is pending (debouncing) or confirmed.",
);
pub const GPU_QUARANTINED: Family = Family::gauge(
    "gpu_health_gpu_quarantined",
    None,
    "1 while the health loop holds the GPU alone by device taints (DeviceTaintRules), the node staying schedulable.",
);
pub const NODE_HEALTHY: Family = Family::gauge(
    "gpu_health_node_healthy",
    None,
    "1 if the health policy finds the node's GPUs healthy, 0 if unhealthy; absent before the first check.",
);
pub const NODE_REASON: Family =
    Family::info("gpu_health_node_reason", "Why the node is unhealthy, one series per reason. Always 1.");
pub const NODE_UNHEALTHY_SINCE: Family = Family::gauge(
    "gpu_health_node_unhealthy_since_timestamp_seconds",
    Some("seconds"),
    "Unix time at which the node became unhealthy.",
);
pub const NODE_QUARANTINED: Family =
    Family::gauge("gpu_health_node_quarantined", None, "1 while the health loop holds a cordon or taint on the node.");
pub const OPTED_OUT: Family = Family::gauge(
    "gpu_health_node_opted_out",
    None,
    "1 if the node carries the opt-out label and the loop changes nothing on it.",
);
pub const ACTIONS: Family = Family::counter(
    "gpu_health_actions",
    None,
    "Node and device actions taken: cordon, uncordon, taint, untaint, device_taint, device_untaint, condition, \
           event, dry_run, blocked, overridden.",
);
pub const API_ERRORS: Family = Family::counter(
    "gpu_health_api_errors",
    None,
    "Failed Kubernetes API requests, every attempt, by operation and error (HTTP code or unreachable).",
);
pub const CHECKS: Family = Family::counter("gpu_health_checks", None, "Health checks run, by kind.");
pub const BREAKER_OPEN: Family = Family::gauge(
    "gpu_health_breaker_open",
    None,
    "1 while the cluster-wide circuit breaker holds back this node's quarantine.",
);
pub const BREAKER_QUARANTINED: Family = Family::gauge(
    "gpu_health_breaker_quarantined_nodes",
    None,
    "GPU nodes quarantined by the health loop cluster-wide, as last counted by this node.",
);
pub const BREAKER_LIMIT: Family = Family::gauge(
    "gpu_health_breaker_limit_nodes",
    None,
    "Most GPU nodes the health loop may quarantine at once, as last computed.",
);
pub const BREAKER_FLEET: Family = Family::gauge(
    "gpu_health_breaker_gpu_nodes",
    None,
    "GPU nodes in the cluster (per the breaker's node selector), as last listed.",
);
pub const BREAKER_GPU_OPEN: Family = Family::gauge(
    "gpu_health_breaker_gpu_open",
    None,
    "1 while the cluster-wide circuit breaker holds back device taints on this node's GPUs.",
);
pub const BREAKER_QUARANTINED_GPUS: Family = Family::gauge(
    "gpu_health_breaker_quarantined_gpus",
    None,
    "GPUs held by the health loop's device taints cluster-wide, as last counted by this node.",
);
pub const BREAKER_LIMIT_GPUS: Family = Family::gauge(
    "gpu_health_breaker_limit_gpus",
    None,
    "Most GPUs the health loop may hold by device taints at once, as last computed.",
);
pub const BREAKER_FLEET_GPUS: Family = Family::gauge(
    "gpu_health_breaker_gpus",
    None,
    "GPUs of the GPU nodes (per their GPU count label), as last listed by the circuit breaker.",
);
pub const DEVICE_TAINTS: Family = Family::info(
    "gpu_health_device_taints",
    "How the health loop holds a single GPU: api_version is the resource.k8s.io version it writes \
           DeviceTaintRules in, none when the cluster serves none (or refused the loop's: failed GPUs are quarantined \
           with their node), unknown before it was asked; effect is the taints' effect. Always 1.",
);
pub const MODE: Family = Family::info(
    "gpu_health_mode",
    "How the health loop runs: mode enforce, condition_only or dry_run; api connected, unreachable, \
           report_only (no API server configured) or off (--kubernetes.api=off: report-only, the API is never \
           contacted). Always 1.",
);

/// Every health family, in render order.
pub const ALL: &[Family] = &[
    GPU_HEALTHY,
    GPU_SIGNAL,
    GPU_QUARANTINED,
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
    BREAKER_GPU_OPEN,
    BREAKER_QUARANTINED_GPUS,
    BREAKER_LIMIT_GPUS,
    BREAKER_FLEET_GPUS,
    DEVICE_TAINTS,
    MODE,
];

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

impl Section for HealthMetrics {
    fn generation(&self) -> u64 {
        HealthMetrics::generation(self)
    }

    fn render(&self, out: &mut dyn Exposition, ctx: &RenderContext) {
        render_view(&self.view(), out, ctx);
    }
}

/// Writes the health families for `view`, with the same label sets as the exporter's
/// own families (`node`, the GPU's `gpu`/`uuid`/`model`, then the constant labels).
pub fn render_view(view: &HealthView, out: &mut dyn Exposition, ctx: &RenderContext) {
    let own = own_label_set(ctx);
    let gpu_labels: Vec<LabelSet> =
        view.gpus.iter().map(|g| device_label_set(ctx, g.index, &g.uuid, &g.model)).collect();
    let gpus = || view.gpus.iter().zip(&gpu_labels);
    // Nothing is called healthy or unhealthy before the first check.
    let known = view.health != Health::Unknown;
    out.emit(&GPU_HEALTHY, &mut |s| {
        if known {
            gpus().for_each(|(g, l)| s.sample(l, &[], flag(g.signals.is_empty())));
        }
    });
    out.emit(&GPU_SIGNAL, &mut |s| {
        for (g, l) in gpus() {
            for (signal, confirmed) in &g.signals {
                let state = if *confirmed { "confirmed" } else { "pending" };
                s.sample(l, &[("signal", signal), ("state", state)], 1.0);
            }
        }
    });
    out.emit(&GPU_QUARANTINED, &mut |s| {
        if known {
            gpus().for_each(|(g, l)| s.sample(l, &[], flag(g.quarantined)));
        }
    });
    out.emit(&NODE_HEALTHY, &mut |s| {
        if known {
            s.sample(&own, &[], flag(view.health == Health::Healthy));
        }
    });
    out.emit(&NODE_REASON, &mut |s| {
        for r in &view.reasons {
            let gpu = r.gpu.map(|g| g.to_string()).unwrap_or_default();
            s.sample(&own, &[("gpu", &gpu), ("reason", &r.code), ("needs", needs_label(r.needs))], 1.0);
        }
    });
    out.emit(&NODE_UNHEALTHY_SINCE, &mut |s| {
        if let Some(t) = view.since {
            s.sample(&own, &[], t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
        }
    });
    out.emit(&NODE_QUARANTINED, &mut |s| s.sample(&own, &[], flag(view.quarantined)));
    out.emit(&OPTED_OUT, &mut |s| s.sample(&own, &[], flag(view.opted_out)));
    render_counters(view, out, &own);
    if let Some(b) = view.breaker {
        out.emit(&BREAKER_OPEN, &mut |s| s.sample(&own, &[], flag(b.open)));
        out.emit(&BREAKER_QUARANTINED, &mut |s| s.sample(&own, &[], b.quarantined as f64));
        out.emit(&BREAKER_LIMIT, &mut |s| s.sample(&own, &[], b.limit as f64));
        out.emit(&BREAKER_FLEET, &mut |s| s.sample(&own, &[], b.fleet as f64));
    }
    if let Some(b) = view.gpu_breaker {
        out.emit(&BREAKER_GPU_OPEN, &mut |s| s.sample(&own, &[], flag(b.open)));
        out.emit(&BREAKER_QUARANTINED_GPUS, &mut |s| s.sample(&own, &[], b.quarantined as f64));
        out.emit(&BREAKER_LIMIT_GPUS, &mut |s| s.sample(&own, &[], b.limit as f64));
        out.emit(&BREAKER_FLEET_GPUS, &mut |s| s.sample(&own, &[], b.fleet as f64));
    }
    out.emit(&DEVICE_TAINTS, &mut |s| {
        s.sample(&own, &[("api_version", view.device_taints), ("effect", view.device_taint_effect)], 1.0)
    });
    out.emit(&MODE, &mut |s| s.sample(&own, &[("mode", view.mode), ("api", view.api)], 1.0));
}

fn needs_label(needs: Needs) -> &'static str {
    match needs {
        Needs::Nothing => "nothing",
        Needs::Reset => "reset",
        Needs::Reboot => "reboot",
    }
}

/// The loop's counters: actions taken, failed API calls, checks run.
fn render_counters(view: &HealthView, out: &mut dyn Exposition, own: &LabelSet) {
    out.emit(&ACTIONS, &mut |s| {
        for (action, count) in &view.actions {
            s.sample(own, &[("action", action)], *count as f64);
        }
    });
    out.emit(&API_ERRORS, &mut |s| {
        for ((op, error), count) in &view.api_errors {
            s.sample(own, &[("operation", op), ("error", error)], *count as f64);
        }
    });
    out.emit(&CHECKS, &mut |s| {
        for (kind, count) in &view.checks {
            s.sample(own, &[("kind", kind)], *count as f64);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{Encoder, Format};
    use gpu_health::verdict::Reason;

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
                quarantined: true,
            }],
            quarantined: true,
            breaker: Some(BreakerView { open: false, quarantined: 1, limit: 2, fleet: 20 }),
            gpu_breaker: Some(BreakerView { open: true, quarantined: 16, limit: 16, fleet: 160 }),
            device_taints: "v1",
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
            text.contains(
                "gpu_health_gpu_quarantined{node=\"gpu-1\",gpu=\"0\",uuid=\"GPU-a\",model=\"H100\",cluster=\"prod\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("gpu_health_breaker_gpu_open{node=\"gpu-1\",cluster=\"prod\"} 1\n"), "{text}");
        assert!(text.contains("gpu_health_breaker_limit_gpus{node=\"gpu-1\",cluster=\"prod\"} 16\n"), "{text}");
        assert!(text.contains("gpu_health_breaker_gpus{node=\"gpu-1\",cluster=\"prod\"} 160\n"), "{text}");
        assert!(
            text.contains(
                "gpu_health_device_taints_info{node=\"gpu-1\",cluster=\"prod\",api_version=\"v1\",effect=\"NoSchedule\"} 1\n"
            ),
            "{text}"
        );
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
