//! prometheus-adapter's command line, as a migrating Deployment passes it:
//!
//! * its flags this adapter implements are accepted under their names (`--config`,
//!   `--prometheus-url`, `--metrics-relist-interval`, `--metrics-max-age`,
//!   `--prometheus-token-file`, `--prometheus-header`, `--prometheus-verb`,
//!   `--prometheus-ca-file`, `--prometheus-client-tls-*`, `--cert-dir`, `--tls-*`,
//!   `--lister-kubeconfig` and the other kubeconfig flags, `--v`, `--logtostderr`, the
//!   webhook cache TTLs, `--disable-http2`, and the flags aggregated API servers share);
//! * its flags this adapter does not implement are refused before parsing, each with a
//!   message that says so and what to do instead ([`UNIMPLEMENTED`]), rather than
//!   clap's "unexpected argument";
//! * the helm chart's first argument, `/adapter` (its image's program, which Go's flag
//!   parsing skips as a positional argument), is dropped.
//!
//! [`cipher_suites`] reads Go's TLS cipher-suite names (`--tls-cipher-suites`).

use std::ffi::OsString;

use rustls::SupportedCipherSuite;

/// prometheus-adapter (and Kubernetes API server) flags not implemented here, with what
/// to do instead. A flag named by prefix ends with `-`.
pub const UNIMPLEMENTED: &[(&str, &str)] = &[
    (
        "prometheus-auth-config",
        "give Prometheus' credentials with --prometheus-token-file, --prometheus-ca-file and --prometheus-client-tls-cert-file/--prometheus-client-tls-key-file",
    ),
    (
        "prometheus-auth-incluster",
        "give the service account token with --prometheus-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token and its CA with --prometheus-ca-file",
    ),
    ("audit-", "this adapter keeps no audit log; requests are logged at debug level (--v=4)"),
    ("profiling", "remove it; this adapter serves no pprof endpoints"),
    ("contention-profiling", "remove it; this adapter serves no pprof endpoints"),
    ("debug-socket-path", "remove it; this adapter serves no pprof endpoints"),
    (
        "authorization-always-allow-paths",
        "remove it; /healthz, /livez and /readyz are always served without authentication, everything else is authorized",
    ),
    (
        "authentication-tolerate-lookup-failure",
        "remove it; the adapter starts without the kube-system ConfigMap and stays not ready until it has read it",
    ),
    ("tls-sni-cert-key", "serve one certificate with --tls-cert-file and --tls-private-key-file"),
    ("http2-max-streams-per-connection", "remove it; or serve HTTP/1.1 only with --disable-http2"),
    ("permit-port-sharing", "remove it"),
    ("permit-address-sharing", "remove it"),
    ("discovery-interval", "remove it; the cluster's resources are read again every 10 minutes"),
    ("client-qps", "remove it; the adapter makes few API requests (watches, cached reviews)"),
    ("client-burst", "remove it; the adapter makes few API requests (watches, cached reviews)"),
    ("enable-priority-and-fairness", "remove it"),
    ("vmodule", "filter logs by module with --log.level (for example gpu_metrics_adapter::source=debug)"),
    ("log-flush-frequency", "remove it; logs are written as they happen"),
    ("alsologtostderr", "remove it; logs always go to standard error"),
    ("log-dir", "remove it; logs always go to standard error"),
    ("log_dir", "remove it; logs always go to standard error"),
    ("log-file", "remove it; logs always go to standard error"),
    ("log_file", "remove it; logs always go to standard error"),
    ("stderrthreshold", "remove it; logs always go to standard error"),
    ("one-output", "remove it; logs always go to standard error"),
    ("skip-headers", "remove it"),
    ("add-dir-header", "remove it"),
    ("feature-gates", "remove it; this adapter has no feature gates"),
];

/// Why a command line was refused before parsing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The flag an argument sets (`--name`, `--name=value`, `-name=value`), if it is one.
fn flag_name(arg: &str) -> Option<&str> {
    let body = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-').filter(|b| b.len() > 1))?;
    Some(body.split_once('=').map_or(body, |(name, _)| name))
}

/// Checks and adjusts a command line (program name first) for prometheus-adapter's flags.
pub fn normalize(args: Vec<OsString>) -> Result<Vec<OsString>, Refused> {
    let mut out = Vec::with_capacity(args.len());
    let mut positional = false;
    for (i, arg) in args.into_iter().enumerate() {
        let text = arg.to_string_lossy();
        if i == 1 && !text.starts_with('-') && (text == "/adapter" || text.ends_with("/adapter")) {
            continue;
        }
        if positional || text == "--" {
            positional = true;
            out.push(arg);
            continue;
        }
        if let Some(name) = flag_name(&text)
            && let Some((flag, hint)) =
                UNIMPLEMENTED.iter().find(|(f, _)| if f.ends_with('-') { name.starts_with(f) } else { name == *f })
        {
            let shown = if flag.ends_with('-') { format!("--{name}") } else { format!("--{flag}") };
            return Err(Refused(format!(
                "{shown} is a prometheus-adapter flag that gpu-metrics-adapter does not implement: {hint}"
            )));
        }
        out.push(arg);
    }
    Ok(out)
}

/// Resolves `--tls-cipher-suites` (Go names) to the TLS 1.2 suites rustls offers, keeping
/// every TLS 1.3 suite (Go does not let them be chosen either). Returns the suites and the
/// names left out because rustls does not implement them; an unknown name, or a list
/// with no suite rustls implements, is an error.
pub fn cipher_suites(names: &[String]) -> Result<(Vec<SupportedCipherSuite>, Vec<String>), String> {
    let provider = rustls::crypto::ring::default_provider();
    let mut chosen: Vec<SupportedCipherSuite> =
        provider.cipher_suites.iter().filter(|s| s.version() == &rustls::version::TLS13).copied().collect();
    let mut left_out = Vec::new();
    let mut tls12 = 0;
    for raw in names {
        let name = raw.trim();
        // Go's older names of the ChaCha20 suites lack the hash.
        let full = if name.ends_with("_CHACHA20_POLY1305") { format!("{name}_SHA256") } else { name.to_owned() };
        if let Some(s) = provider.cipher_suites.iter().find(|s| format!("{:?}", s.suite()) == full) {
            if s.version() == &rustls::version::TLS12 && !chosen.iter().any(|c| c.suite() == s.suite()) {
                chosen.push(*s);
                tls12 += 1;
            }
            continue;
        }
        if provider.cipher_suites.iter().any(|s| format!("{:?}", s.suite()) == full.replacen("TLS_", "TLS13_", 1)) {
            continue;
        }
        let go_only = full.starts_with("TLS_RSA_WITH_")
            || full.starts_with("TLS_ECDHE_")
            || full.starts_with("TLS_ECDH_")
            || full.starts_with("TLS_DHE_");
        if go_only {
            left_out.push(full);
        } else {
            return Err(format!("--tls-cipher-suites: unknown cipher suite {name:?}"));
        }
    }
    if tls12 == 0 && !names.is_empty() {
        return Err(format!(
            "--tls-cipher-suites: none of {} is a suite rustls implements (it has only AEAD suites with ECDHE key exchange)",
            names.join(",")
        ));
    }
    Ok((chosen, left_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_helm_charts_program_argument_is_dropped() {
        let out = normalize(argv(&["gpu-metrics-adapter", "/adapter", "--secure-port=6443"])).unwrap();
        assert_eq!(out, argv(&["gpu-metrics-adapter", "--secure-port=6443"]));
        // only as the first argument
        let out = normalize(argv(&["x", "--config", "/adapter"])).unwrap();
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn unimplemented_flags_are_refused_with_what_to_do() {
        let e = normalize(argv(&["x", "--prometheus-auth-config=/etc/p/kubeconfig"])).unwrap_err().0;
        assert!(
            e.starts_with(
                "--prometheus-auth-config is a prometheus-adapter flag that gpu-metrics-adapter does not implement"
            ),
            "{e}"
        );
        assert!(e.contains("--prometheus-token-file"), "{e}");
        let e = normalize(argv(&["x", "--audit-log-path", "/tmp/a"])).unwrap_err().0;
        assert!(e.starts_with("--audit-log-path is a prometheus-adapter flag"), "{e}");
        assert!(normalize(argv(&["x", "-profiling"])).is_err());
        // implemented ones pass through untouched
        let ok = argv(&["x", "--config=/etc/adapter/config.yaml", "--v=4", "--logtostderr=true", "--", "--profiling"]);
        assert_eq!(normalize(ok.clone()).unwrap(), ok);
    }

    #[test]
    fn cipher_suites_follow_go_names() {
        let kube_prometheus: Vec<String> = "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
            .split(',')
            .map(str::to_owned)
            .collect();
        let (suites, left_out) = cipher_suites(&kube_prometheus).unwrap();
        assert!(left_out.is_empty(), "{left_out:?}");
        assert_eq!(suites.iter().filter(|s| s.version() == &rustls::version::TLS12).count(), 6);
        assert_eq!(suites.iter().filter(|s| s.version() == &rustls::version::TLS13).count(), 3);
        let (suites, left_out) =
            cipher_suites(&["TLS_RSA_WITH_AES_128_CBC_SHA".into(), "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()])
                .unwrap();
        assert_eq!(left_out, ["TLS_RSA_WITH_AES_128_CBC_SHA"]);
        assert_eq!(suites.len(), 4);
        assert!(cipher_suites(&["TLS_RSA_WITH_AES_128_CBC_SHA".into()]).unwrap_err().contains("none of"));
        assert!(cipher_suites(&["TLS_FANCY".into()]).unwrap_err().contains("unknown cipher suite"));
    }
}
