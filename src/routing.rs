//! Routes for the session actors: a route name → its targets in order, each a provider's model
//! (the local ONNX pool or an OpenAI-compatible API). A call goes to the first target; when it
//! fails before any text was streamed, the next target is tried. This is the minimal router the
//! sessions need; retries, cooldowns, caching, limits and the request log are the model router's
//! (issue 6) and will replace this module.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use stead_actors::session::{ModelClient, ModelRequest};
use stead_actors::ModelOutput;
use stead_inference::pool::InferencePool;
use tokio::sync::mpsc::UnboundedSender;

use crate::config::{Config, ProviderKind};
use crate::local_model::LocalModel;
use crate::openai_model::OpenAiModel;

/// Most tokens one model call of a session may generate on the local engine.
const LOCAL_MAX_TOKENS: usize = 512;
/// The deadline of one remote model call.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(120);

struct Target {
    provider: String,
    /// `None`: the provider is configured but not available (an unprepared local model).
    client: Option<Arc<dyn ModelClient>>,
}

/// Every configured route, ready to call.
pub struct Routes {
    routes: HashMap<String, Vec<Target>>,
}

impl Routes {
    /// Builds the routes over the started local pools (by provider name).
    pub fn build(config: &Config, pools: &[(String, Arc<InferencePool>)]) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("stead/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let mut routes = HashMap::new();
        for route in &config.routes {
            let mut targets = Vec::new();
            for target in &route.targets {
                let provider = config
                    .providers
                    .iter()
                    .find(|p| p.name == target.provider)
                    .ok_or_else(|| anyhow::anyhow!("no provider `{}`", target.provider))?;
                let model: Option<Arc<dyn ModelClient>> = match provider.kind {
                    ProviderKind::Onnx => pools
                        .iter()
                        .find(|(name, _)| *name == provider.name)
                        .map(|(_, pool)| {
                            Arc::new(LocalModel {
                                pool: pool.clone(),
                                max_tokens: LOCAL_MAX_TOKENS,
                            }) as Arc<dyn ModelClient>
                        }),
                    ProviderKind::Openai => {
                        let api_key = provider.api_key_env.as_ref().and_then(|var| {
                            let key = std::env::var(var).ok();
                            if key.is_none() {
                                tracing::warn!(provider = %provider.name, variable = %var,
                                    "the API key variable is not set; calling without a key");
                            }
                            key
                        });
                        Some(Arc::new(OpenAiModel {
                            provider: provider.name.clone(),
                            base_url: provider
                                .base_url
                                .clone()
                                .unwrap_or_default()
                                .trim_end_matches('/')
                                .to_string(),
                            model: target.model.clone(),
                            api_key,
                            max_tokens: None,
                            timeout: REMOTE_TIMEOUT,
                            client: client.clone(),
                        }))
                    }
                };
                targets.push(Target {
                    provider: provider.name.clone(),
                    client: model,
                });
            }
            routes.insert(route.name.clone(), targets);
        }
        Ok(Routes { routes })
    }

    /// The route names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.routes.keys().cloned().collect();
        names.sort();
        names
    }
}

#[async_trait]
impl ModelClient for Routes {
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: Arc<AtomicBool>,
    ) -> Result<ModelOutput, String> {
        let targets = self
            .routes
            .get(&request.route)
            .ok_or_else(|| format!("no route is named `{}`", request.route))?;
        let mut errors = Vec::new();
        for target in targets {
            let Some(client) = &target.client else {
                errors.push(format!("{}: not available", target.provider));
                continue;
            };
            // Forward the target's deltas, noting whether any text reached the caller: after
            // that, falling back would repeat text (mid-stream failover is the router's).
            let (forward, mut stream) = tokio::sync::mpsc::unbounded_channel::<String>();
            let streamed = Arc::new(AtomicBool::new(false));
            let relay = {
                let deltas = deltas.clone();
                let streamed = streamed.clone();
                tokio::spawn(async move {
                    while let Some(text) = stream.recv().await {
                        streamed.store(true, Ordering::Relaxed);
                        let _ = deltas.send(text);
                    }
                })
            };
            let result = client
                .complete(request.clone(), forward, cancel.clone())
                .await;
            let _ = relay.await;
            match result {
                Ok(output) => return Ok(output),
                Err(error) => {
                    let fatal = streamed.load(Ordering::Relaxed) || cancel.load(Ordering::Relaxed);
                    errors.push(format!("{}: {error}", target.provider));
                    if fatal {
                        break;
                    }
                }
            }
        }
        Err(format!(
            "route `{}` failed: {}",
            request.route,
            errors.join("; ")
        ))
    }
}
