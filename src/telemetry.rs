//! Logs and traces. Logs go to stderr (text or JSON). Traces are exported over OTLP/HTTP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, protobuf by
//! default or JSON with `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`: the `tracing` spans of model
//! calls (`chat {route}`), agent turns (`invoke_agent {agent}`) and tool calls
//! (`execute_tool {tool}`) become OpenTelemetry spans with the GenAI semantic conventions'
//! attributes. The spans' level filter is the log filter's.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use stead_config::{Config, LogFormat};

/// The exporter's HTTP client. The batch processor exports from a thread of its own, which has
/// no tokio runtime, so each request runs as a task on the runtime captured at start.
#[derive(Debug, Clone)]
struct TokioReqwestClient {
    client: reqwest::Client,
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for TokioReqwestClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let send = async move {
            let request: reqwest::Request = request.try_into()?;
            let mut response = client.execute(request).await?;
            let status = response.status();
            let headers = std::mem::take(response.headers_mut());
            let body = response.bytes().await?;
            let mut out = Response::builder().status(status).body(body)?;
            *out.headers_mut() = headers;
            Ok::<_, HttpError>(out)
        };
        self.handle.spawn(send).await?
    }
}

/// The trace exporter, when an OTLP endpoint is configured (inside a tokio runtime).
pub fn tracer_provider() -> Option<SdkTracerProvider> {
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        && set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
    {
        return None;
    }
    let protocol = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .as_deref()
    {
        Some("http/json") => Protocol::HttpJson,
        _ => Protocol::HttpBinary,
    };
    let handle = tokio::runtime::Handle::try_current().ok()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .ok()?;
    // No `.with_endpoint`: the exporter reads the variables (appending `/v1/traces` to
    // OTEL_EXPORTER_OTLP_ENDPOINT), and their headers and timeout.
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(TokioReqwestClient { client, handle })
        .with_protocol(protocol)
        .build()
    {
        Ok(exporter) => exporter,
        Err(error) => {
            eprintln!("stead: the OTLP trace exporter could not start: {error}");
            return None;
        }
    };
    Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name("stead").build())
            .build(),
    )
}

/// Installs the log (and, with a provider, trace) subscriber.
pub fn init(config: &Config, provider: Option<&SdkTracerProvider>) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // rmcp logs every MCP notification with its payload at `info` (each progress step of every
    // call): quiet unless the filter names it.
    let named = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log.filter.clone());
    let filter = if named.contains("rmcp") {
        filter
    } else {
        filter.add_directive("rmcp=warn".parse().unwrap_or_default())
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = match config.log.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let otel = provider.map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("stead"))
            .with_threads(false)
            .with_location(false)
            .with_tracked_inactivity(false)
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init();
}

/// Exports what is left and stops the exporter.
pub async fn shutdown(provider: Option<SdkTracerProvider>) {
    if let Some(provider) = provider {
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(error) = provider.force_flush() {
                eprintln!("stead: exporting the last traces failed: {error}");
            }
            let _ = provider.shutdown();
        })
        .await;
    }
}
