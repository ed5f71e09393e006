//! A route's guardrails over the requests it takes (docs/guardrails.md): they run first, so a
//! `redact` rewrites the messages before anything else — the cache key, the providers, the
//! request log, the span — sees them, and a `block` refuses the call before any limit, budget
//! or provider is touched.

use stead_guardrails::{Guardrails, Placeholders, Verdict};
use uuid::Uuid;

use crate::provider::RouterRequest;
use crate::{Router, RouterError, RouterErrorCode};

/// A route that names a guardrail that is not configured.
#[derive(Debug, thiserror::Error)]
#[error("route `{route}` names guardrail `{guardrail}`, which is not configured")]
pub struct UnknownGuardrail {
    pub route: String,
    pub guardrail: String,
}

impl Router {
    /// The router with the configured guardrails its routes name.
    pub fn with_guardrails(mut self, guardrails: Guardrails) -> Result<Self, UnknownGuardrail> {
        for (name, route) in &self.routes {
            if let Some(missing) = route
                .guardrails
                .iter()
                .find(|g| guardrails.get(g).is_none())
            {
                return Err(UnknownGuardrail {
                    route: name.clone(),
                    guardrail: missing.clone(),
                });
            }
        }
        self.guardrails = guardrails;
        Ok(self)
    }

    /// Runs the route's guardrails over the request's messages, in order: `redact` replaces
    /// each finding with its placeholder in place, `block` refuses the call naming the
    /// guardrail and what it found (never the text), `flag` lets it pass. The verdicts of
    /// those that found something.
    pub(crate) fn guard_request(
        &self,
        id: Uuid,
        request: &mut RouterRequest,
    ) -> Result<Vec<Verdict>, RouterError> {
        let Some(route) = self.routes.get(&request.route) else {
            return Ok(Vec::new());
        };
        if route.guardrails.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<_> = route
            .guardrails
            .iter()
            .filter_map(|name| self.guardrails.get(name))
            .collect();
        let mut texts: Vec<String> = request.messages.iter().map(|m| m.content.clone()).collect();
        match stead_guardrails::apply(&list, &mut texts, &mut Placeholders::default()) {
            Ok(verdicts) => {
                for (message, text) in request.messages.iter_mut().zip(texts) {
                    message.content = text;
                }
                for verdict in &verdicts {
                    tracing::info!(request = %id, route = %request.route,
                        guardrail = %verdict.guardrail, action = verdict.action.as_str(),
                        found = ?verdict.found, "guardrail");
                }
                Ok(verdicts)
            }
            Err(blocked) => Err(RouterError {
                id,
                code: RouterErrorCode::GuardrailBlocked,
                message: format!(
                    "guardrail `{}` blocked the request: it holds {}",
                    blocked.guardrail,
                    blocked.entities.join(", ")
                ),
                unquoted: None,
                retry_after: None,
                attempts: Vec::new(),
                budget: None,
            }),
        }
    }
}
