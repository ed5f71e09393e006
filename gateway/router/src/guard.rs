//! A route's guardrails over the requests it takes (docs/guardrails.md): they run first, so a
//! `redact` rewrites the messages before anything else — the cache key, the providers, the
//! request log, the span — sees them, and a `block` refuses the call before any limit, budget
//! or provider is touched. The answer goes through them too, streamed or not, through a
//! [`Holdback`]: what the client is sent, the answer the caller gets (a session journals it)
//! and the request log hold the same redacted text.
//!
//! Checks that ask a model (`judge`; `injection` with a `route`) run after every guardrail's
//! patterns, in the route's order, over the text as the patterns left it (so the model asked
//! never sees a value a `redact` hid): each user and tool message alone for a `judge`, each
//! tool message for an `injection` (a user's message is meant to instruct), an answer whole
//! for a `judge` (a streamed one is held until its verdict). Verdicts are remembered by text,
//! so a session's history is asked about once. The router asks the model through itself
//! ([`Judge`] for [`Router`]), charged to the caller's key.

use std::sync::Arc;

use async_trait::async_trait;
use stead_guardrails::judge::{Judge, JudgeError};
use stead_guardrails::metrics::{count, Place};
use stead_guardrails::{
    Blocked, Guardrail, GuardrailAction, GuardrailKind, Guardrails, Holdback, OnError,
    Placeholders, Verdict,
};
use stead_model::chat::{ChatMessage, Role};
use stead_model::log::GuardrailEntry;
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use crate::provider::RouterRequest;
use crate::{CallOptions, Router, RouterError, RouterErrorCode};

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
    refusal(
        id,
        format!(
            "guardrail `{}` blocked the {what}: it holds {}",
            blocked.guardrail,
            blocked.entities.join(", ")
        ),
    )
}

fn refusal(id: Uuid, message: String) -> RouterError {
    RouterError {
        id,
        code: RouterErrorCode::GuardrailBlocked,
        message,
        unquoted: None,
        retry_after: None,
        attempts: Vec::new(),
        budget: None,
    }
}

/// The texts of a call's messages a model check asks about: a `judge`'s, each user and tool
/// message; an `injection`'s, each tool message (data the model reads).
fn model_texts(guardrail: &Guardrail, messages: &[ChatMessage]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| match guardrail.kind {
            GuardrailKind::Judge => matches!(m.role, Role::User | Role::Tool),
            _ => matches!(m.role, Role::Tool),
        })
        .map(|m| m.content.clone())
        .collect()
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
    pub(crate) async fn guard_inputs(
        &self,
        id: Uuid,
        request: &crate::EmbedRequest,
        options: &CallOptions,
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
                // Inputs are data (documents, chunks): every model check asks about each.
                for guardrail in list.iter().filter(|g| g.judge.is_some()) {
                    self.model_check(id, guardrail, &inputs, options, Place::Request, acted)
                        .await?;
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
    pub(crate) async fn guard_request(
        &self,
        id: Uuid,
        request: &mut RouterRequest,
        options: &CallOptions,
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
                for guardrail in list.iter().filter(|g| g.judge.is_some()) {
                    let texts = model_texts(guardrail, &request.messages);
                    self.model_check(id, guardrail, &texts, options, Place::Request, acted)
                        .await?;
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
    /// now. A `block` finding fails the call. A `judge` guardrail asks about the whole answer:
    /// a streamed one was held whole, and is sent to `deltas` once the verdict passes it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn guard_answer(
        &self,
        id: Uuid,
        mut response: crate::RouterResponse,
        guard: &Guard,
        mut holdback: Holdback,
        options: &CallOptions,
        deltas: Option<&UnboundedSender<String>>,
        acted: &mut Vec<GuardrailEntry>,
    ) -> Result<crate::RouterResponse, RouterError> {
        let streamed = deltas.is_some();
        if !streamed {
            holdback.push(&response.text);
        }
        let held = if !streamed || holdback.holds_whole() {
            holdback.finish()
        } else {
            None
        };
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
        for guardrail in guard.list.iter().filter(|g| g.kind == GuardrailKind::Judge) {
            let answer = std::slice::from_ref(&response.text);
            self.model_check(id, guardrail, answer, options, Place::Answer, acted)
                .await?;
        }
        if let (Some(deltas), Some(held)) = (deltas, held.filter(|t| !t.is_empty())) {
            let _ = deltas.send(held);
        }
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

impl Router {
    /// Asks `guardrail`'s model about `texts` ([`stead_guardrails::judge::judge_texts`]): a
    /// `fail` blocks the call or is flagged, as the guardrail's action says; a failed or late
    /// check blocks unless the guardrail says `on_error = "allow"`. The model's reason goes to
    /// the process log only (it may quote the text).
    async fn model_check(
        &self,
        id: Uuid,
        guardrail: &Guardrail,
        texts: &[String],
        options: &CallOptions,
        place: Place,
        acted: &mut Vec<GuardrailEntry>,
    ) -> Result<(), RouterError> {
        let principal = options.api_key.clone().unwrap_or_default();
        let verdict = stead_guardrails::judge::judge_texts(
            guardrail,
            texts,
            self,
            &principal,
            &self.verdicts,
        )
        .await;
        let what = match place {
            Place::Answer => "answer",
            _ => "request",
        };
        let entity = match guardrail.kind {
            GuardrailKind::Judge => "POLICY",
            _ => "INJECTION",
        };
        match verdict {
            Ok(verdict) if verdict.pass => Ok(()),
            Ok(verdict) => {
                tracing::info!(request = %id, guardrail = %guardrail.name, place = what,
                    reason = ?verdict.reason, "guardrail (model check) failed the text");
                let blocked = Blocked {
                    guardrail: guardrail.name.clone(),
                    entities: vec![entity.to_string()],
                };
                if guardrail.action == GuardrailAction::Block {
                    acted.push(blocked_entry(&blocked, place));
                    return Err(blocked_error(id, &blocked, what));
                }
                count(&guardrail.name, place, "flag");
                acted.push(GuardrailEntry {
                    guardrail: guardrail.name.clone(),
                    place: place.as_str().to_string(),
                    effect: "flag".into(),
                    entities: blocked.entities,
                });
                Ok(())
            }
            Err(JudgeError(error)) => {
                tracing::warn!(request = %id, guardrail = %guardrail.name, place = what,
                    %error, "guardrail (model check) could not check the text");
                count(&guardrail.name, place, "error");
                acted.push(GuardrailEntry {
                    guardrail: guardrail.name.clone(),
                    place: place.as_str().to_string(),
                    effect: "error".into(),
                    entities: Vec::new(),
                });
                match guardrail.on_error {
                    OnError::Block => Err(refusal(
                        id,
                        format!(
                            "guardrail `{}` could not check the {what}: {error}",
                            guardrail.name
                        ),
                    )),
                    OnError::Allow => Ok(()),
                }
            }
        }
    }
}

/// The model a guardrail asks, reached through the router itself: a system and a user message
/// to a route, at temperature 0, charged to `principal` (none when empty: the route's own
/// limits still apply); its request-log row says `purpose: guardrail`.
#[async_trait]
impl Judge for Router {
    async fn ask(
        &self,
        route: &str,
        system: &str,
        user: &str,
        principal: &str,
    ) -> Result<String, JudgeError> {
        let request = RouterRequest {
            route: route.to_string(),
            messages: vec![ChatMessage::system(system), ChatMessage::user(user)],
            params: stead_model::Params {
                temperature: Some(0.0),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut metadata = serde_json::Map::new();
        metadata.insert("purpose".into(), "guardrail".into());
        let options = CallOptions {
            api_key: (!principal.is_empty()).then(|| principal.to_string()),
            metadata: crate::log_metadata(&metadata),
            ..Default::default()
        };
        // Boxed: a route's guardrail asks through `call`, which runs the route's guardrails.
        let answer: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>> =
            Box::pin(self.call(request, options, None));
        answer
            .await
            .map(|answer| answer.text)
            .map_err(|e| JudgeError(format!("{}: {}", e.code, e.message)))
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
