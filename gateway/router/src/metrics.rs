//! Prometheus histograms of model calls, named after OpenTelemetry's GenAI client metrics:
//! token usage, operation duration, time to first token and time per output token, each by
//! route, provider and model.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};

/// Upper bounds (seconds) of the duration buckets.
const SECONDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds of the token buckets.
const TOKENS: [f64; 12] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (i, bound) in bounds.iter().enumerate() {
            if value <= *bound {
                self.counts[i] += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}

/// `(metric, labels)` → histogram.
type Series = BTreeMap<(&'static str, String), Histogram>;

/// The router's histograms.
#[derive(Debug, Default)]
pub struct RouterMetrics {
    series: Mutex<Series>,
}

/// One finished call, as the metrics see it.
pub struct Observation<'a> {
    pub route: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub ok: bool,
    pub duration_s: f64,
    pub ttft_s: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl RouterMetrics {
    pub fn observe(&self, o: &Observation<'_>) {
        let base = format!(
            "route=\"{}\",provider=\"{}\",model=\"{}\"",
            escape(o.route),
            escape(o.provider),
            escape(o.model)
        );
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let outcome = if o.ok { "ok" } else { "error" };
        series
            .entry((
                "stead_gen_ai_client_operation_duration_seconds",
                format!("{base},outcome=\"{outcome}\""),
            ))
            .or_default()
            .observe(&SECONDS, o.duration_s);
        if !o.ok {
            return;
        }
        for (kind, tokens) in [("input", o.input_tokens), ("output", o.output_tokens)] {
            series
                .entry((
                    "stead_gen_ai_client_token_usage",
                    format!("{base},token_type=\"{kind}\""),
                ))
                .or_default()
                .observe(&TOKENS, tokens as f64);
        }
        if let Some(ttft) = o.ttft_s {
            series
                .entry((
                    "stead_gen_ai_server_time_to_first_token_seconds",
                    base.clone(),
                ))
                .or_default()
                .observe(&SECONDS, ttft);
            if o.output_tokens > 1 {
                let per_token = (o.duration_s - ttft).max(0.0) / (o.output_tokens - 1) as f64;
                series
                    .entry(("stead_gen_ai_server_time_per_output_token_seconds", base))
                    .or_default()
                    .observe(&SECONDS, per_token);
            }
        }
    }

    /// The histograms in Prometheus' text format.
    pub fn render(&self) -> String {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let mut last = "";
        for ((name, labels), histogram) in series.iter() {
            if *name != last {
                let help = match *name {
                    "stead_gen_ai_client_token_usage" => "Tokens per model call, by type",
                    "stead_gen_ai_client_operation_duration_seconds" => "Duration of model calls",
                    "stead_gen_ai_server_time_to_first_token_seconds" => {
                        "Time to the first token of streamed model calls"
                    }
                    _ => "Time per output token after the first",
                };
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
                last = name;
            }
            let bounds: &[f64] = if *name == "stead_gen_ai_client_token_usage" {
                &TOKENS
            } else {
                &SECONDS
            };
            for (bound, count) in bounds.iter().zip(&histogram.counts) {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
            }
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}",
                histogram.count, histogram.sum, histogram.count
            );
        }
        out
    }
}

/// Providers' own figures in the Prometheus text format, grouped by family.
pub(crate) fn render_provider_metrics(
    out: &mut String,
    figures: &[(String, crate::provider::ProviderMetric)],
) {
    let mut families: BTreeMap<&'static str, Vec<&(String, crate::provider::ProviderMetric)>> =
        BTreeMap::new();
    for figure in figures {
        families.entry(figure.1.name).or_default().push(figure);
    }
    for (name, series) in families {
        let first = &series[0].1;
        let kind = if first.counter { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} {kind}", first.help);
        for (provider, metric) in series {
            let _ = writeln!(
                out,
                "{name}{{provider=\"{}\",model=\"{}\"}} {}",
                escape(provider),
                escape(&metric.model),
                metric.value
            );
        }
    }
}
