//! The monitoring mixin in deploy/mixin: its rule file, promtool unit tests and Grafana
//! dashboard, and the metric names their expressions use.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use serde_json::Value;

/// A file of deploy/mixin.
pub fn file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/mixin")
        .join(name)
}

/// The expressions of the rule file (each on its `expr:` line).
pub fn rule_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(file("rules.yml")).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(|e| e.trim().to_owned())
        .collect()
}

/// The dashboard.
pub fn dashboard() -> Value {
    let text = std::fs::read_to_string(file("dashboard.json")).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("dashboard.json: {e}"))
}

/// Every panel of the dashboard, rows' panels included.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// The dashboard's expressions (panel targets, and its variables' queries), with
/// Grafana's variables put as PromQL would read them after substitution.
pub fn dashboard_exprs() -> Vec<String> {
    let d = dashboard();
    let mut out: Vec<String> = panels(&d)
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .map(grafana_to_promql)
        .collect();
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        // label_values(metric, label): the metric must exist.
        if let Some(q) = v["query"]["query"].as_str().or(v["query"].as_str())
            && let Some(inner) = q.strip_prefix("label_values(")
        {
            let metric = inner.split([',', ')']).next().unwrap_or("").trim();
            out.push(metric.to_owned());
        }
    }
    out
}

/// A Grafana expression as the PromQL it becomes: its interval variables as a
/// duration, its other variables as a regular expression.
pub fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
        .replace("${instance:regex}", ".*")
        .replace("${target:regex}", ".*")
        .replace("$instance", ".*")
        .replace("$target", ".*")
        .replace("$topk", "10")
}

/// The metric names (no recording rule's) an expression uses.
pub fn names_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_quotes = false;
    let mut word = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_quotes = !in_quotes;
        }
        if !in_quotes && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if (word.starts_with("rtm_") || word.starts_with("process_")) && !word.contains(':') {
            out.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    out
}

/// Every metric name the rules and the dashboard use.
pub fn metric_names() -> BTreeSet<String> {
    rule_exprs()
        .iter()
        .chain(dashboard_exprs().iter())
        .flat_map(|e| names_in(e))
        .collect()
}

/// Metrics exported only in some setups (an MPI rule, `bpf_stats = true`) or once
/// something happened (a counter by reason has no series before its first count).
pub fn optional(name: &str) -> bool {
    name == "rtm_attach_errors_total"
        || name == "rtm_targets_turned_away_total"
        || name.starts_with("rtm_mpi_")
        || name.starts_with("rtm_bpf_program_")
        || name == "rtm_bpf_map_memory_bytes"
}
