//! A route's guardrails over the requests it takes (docs/guardrails.md): they run first, so a
//! `redact` rewrites the messages before anything else — the cache key, the providers, the
//! request log, the span — sees them, and a `block` refuses the call before any limit, budget
//! or provider is touched. The answer goes through them too, streamed or not, through a
//! [`Holdback`]: what the client is sent, the answer the caller gets (a session journals it)
//! and the request log hold the same redacted text.

use std::sync::Arc;

use stead_guardrails::metrics::{count, Place};
use stead_guardrails::{Blocked, Guardrail, Guardrails, Holdback, Placeholders, Verdict};
use stead_model::log::GuardrailEntry;
use uuid::Uuid;

use crate::provider::RouterRequest;
use crate::{Router, RouterError, RouterErrorCode};

/// A call's guardrails, kept for its answer: the route's list, and the placeholders its
/// request was given (an answer that repeats a value shows the same placeholder).
pub(crate) struct Guard {
    list: Vec<Arc<Guardrail>>,
    placeholders: Placeholders,
}

impl Guard {
    pub(crate) fn holdback(&self) -> Holdback {
        Holdback::new(self.list.clone(), self.placeholders.clone())
    }
}

/// What a guardrail did, as `/metrics` counts it and the call's request-log row keeps it.
fn entry(verdict: &Verdict, place: Place) -> GuardrailEntry {
    count(&verdict.guardrail, place, verdict.action.as_str());
    GuardrailEntry {
        guardrail: verdict.guardrail.clone(),
        place: place.as_str().to_string(),
        effect: verdict.action.as_str().to_string(),
        entities: verdict.found.iter().map(|(e, _)| e.clone()).collect(),
    }
}

/// A refusal, as `/metrics` counts it and the call's request-log row keeps it.
fn blocked_entry(blocked: &Blocked, place: Place) -> GuardrailEntry {
    count(&blocked.guardrail, place, "block");
    GuardrailEntry {
        guardrail: blocked.guardrail.clone(),
        place: place.as_str().to_string(),
        effect: "block".into(),
        entities: blocked.entities.clone(),
    }
}

/// The refusal of a `block` guardrail, of the request or of the answer.
fn blocked_error(id: Uuid, blocked: &Blocked, what: &str) -> RouterError {
    RouterError {
        id,
        code: RouterErrorCode::GuardrailBlocked,
        message: format!(
            "guardrail `{}` blocked the {what}: it holds {}",
            blocked.guardrail,
            blocked.entities.join(", ")
        ),
        unquoted: None,
        retry_after: None,
        attempts: Vec::new(),
        budget: None,
    }
}

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

    /// The guardrails of `route`, in its order (none for an unknown route).
    fn route_guardrails(&self, route: &str) -> Vec<Arc<Guardrail>> {
        self.routes.get(route).map_or_else(Vec::new, |route| {
            route
                .guardrails
                .iter()
                .filter_map(|name| self.guardrails.get(name))
                .collect()
        })
    }

    /// The route's guardrails over an embedding request's inputs: a `redact` embeds the
    /// placeholders instead of the values, a `block` refuses the call. The request as they
    /// left it (`None`: the route has no guardrails).
    pub(crate) fn guard_inputs(
        &self,
        id: Uuid,
        request: &crate::EmbedRequest,
        acted: &mut Vec<GuardrailEntry>,
    ) -> Result<Option<crate::EmbedRequest>, RouterError> {
        let list = self.route_guardrails(&request.route);
        if list.is_empty() {
            return Ok(None);
        }
        let mut inputs = request.inputs.clone();
        let mut placeholders = Placeholders::default();
        match stead_guardrails::apply(&list, &mut inputs, &mut placeholders) {
            Ok(verdicts) => {
                for verdict in &verdicts {
                    tracing::info!(request = %id, route = %request.route,
                        guardrail = %verdict.guardrail, action = verdict.action.as_str(),
                        found = ?verdict.found, "guardrail (embedding inputs)");
                    acted.push(entry(verdict, Place::Request));
                }
                Ok(Some(crate::EmbedRequest {
                    route: request.route.clone(),
                    inputs,
                }))
            }
            Err(blocked) => {
                acted.push(blocked_entry(&blocked, Place::Request));
                Err(blocked_error(id, &blocked, "request"))
            }
        }
    }

    /// Runs the route's guardrails over the request's messages, in order: `redact` replaces
    /// each finding with its placeholder in place, `block` refuses the call naming the
    /// guardrail and what it found (never the text), `flag` lets it pass. The call's guard for
    /// its answer (`None`: the route has no guardrails).
    pub(crate) fn guard_request(
        &self,
        id: Uuid,
        request: &mut RouterRequest,
        acted: &mut Vec<GuardrailEntry>,
    ) -> Result<Option<Guard>, RouterError> {
        let list = self.route_guardrails(&request.route);
        if list.is_empty() {
            return Ok(None);
        }
        // Each message's text, then its tool calls' arguments, in order: values are numbered
        // by where they first appear.
        let mut texts: Vec<String> = Vec::new();
        for message in &request.messages {
            texts.push(message.content.clone());
            texts.extend(message.tool_calls.iter().map(|c| c.arguments.clone()));
        }
        let mut placeholders = Placeholders::default();
        match stead_guardrails::apply(&list, &mut texts, &mut placeholders) {
            Ok(verdicts) => {
                let mut texts = texts.into_iter();
                for message in &mut request.messages {
                    message.content = texts.next().unwrap_or_default();
                    for call in &mut message.tool_calls {
                        call.arguments = texts.next().unwrap_or_default();
                    }
                }
                for verdict in &verdicts {
                    tracing::info!(request = %id, route = %request.route,
                        guardrail = %verdict.guardrail, action = verdict.action.as_str(),
                        found = ?verdict.found, "guardrail");
                    acted.push(entry(verdict, Place::Request));
                }
                Ok(Some(Guard { list, placeholders }))
            }
            Err(blocked) => {
                acted.push(blocked_entry(&blocked, Place::Request));
                Err(blocked_error(id, &blocked, "request"))
            }
        }
    }

    /// The answer as its guardrails leave it: with `holdback` the streamed text already went
    /// through it (the answer becomes exactly what was sent); else the whole text goes through
    /// now. A `block` finding fails the call.
    pub(crate) fn guard_answer(
        &self,
        id: Uuid,
        mut response: crate::RouterResponse,
        guard: &Guard,
        mut holdback: Holdback,
        streamed: bool,
        acted: &mut Vec<GuardrailEntry>,
    ) -> Result<crate::RouterResponse, RouterError> {
        if !streamed {
            holdback.push(&response.text);
            holdback.finish();
        }
        if let Some(blocked) = holdback.blocked() {
            acted.push(blocked_entry(blocked, Place::Answer));
            return Err(blocked_error(id, blocked, "answer"));
        }
        for verdict in holdback.verdicts() {
            tracing::info!(request = %id, guardrail = %verdict.guardrail,
                action = verdict.action.as_str(), found = ?verdict.found, "guardrail (answer)");
            acted.push(entry(verdict, Place::Answer));
        }
        response.text = holdback.released().to_string();
        // A placeholder the model wrote into a tool call stands for its value, when its
        // guardrail allows it: the tool gets the value (docs/guardrails.md, "Tools").
        if guard.placeholders.any_restorable() {
            for call in &mut response.tool_calls {
                call.arguments = restore_json(&guard.placeholders, &call.arguments);
            }
        }
        Ok(response)
    }
}

/// Tool-call arguments (JSON) with the restorable placeholders in their strings turned back
/// into values (as text when they are not JSON).
fn restore_json(placeholders: &Placeholders, arguments: &str) -> String {
    fn walk(placeholders: &Placeholders, value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => *text = placeholders.restore(text),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| walk(placeholders, v)),
            serde_json::Value::Object(map) => map.values_mut().for_each(|v| walk(placeholders, v)),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(mut value) => {
            walk(placeholders, &mut value);
            value.to_string()
        }
        Err(_) => placeholders.restore(arguments),
    }
}
