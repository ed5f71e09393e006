//! What a call leaves behind however it ends: the ledger of what it committed to (admission,
//! its budget reservation, its stream), the guard that settles a call whose caller went away,
//! and what its request-log row keeps of the caller's metadata and bodies.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use chrono::{DateTime, Utc};

use crate::config::LogBodies;
use crate::log::{LogStatus, RequestLogEntry};
use crate::metrics::Observation;
use crate::provider::RouterRequest;
use crate::spend::CallReservation;
use crate::{CallOptions, Router, RouterError, RouterErrorCode};

impl Router {
    /// What every record of one call says (who, when, which route, how long); the outcome
    /// fills in the rest.
    pub(crate) fn base_record(
        &self,
        id: Uuid,
        at: DateTime<Utc>,
        options: &CallOptions,
        route: &str,
        latency: Duration,
        stream: bool,
    ) -> RequestLogEntry {
        RequestLogEntry {
            id,
            at,
            session_id: options.session_id,
            api_key: options.api_key.clone(),
            route: route.to_string(),
            provider: None,
            model: None,
            status: LogStatus::Ok,
            attempts: Vec::new(),
            latency_ms: millis(latency),
            ttft_ms: None,
            tokens_in: 0,
            tokens_out: 0,
            cost: 0.0,
            cache_hit: false,
            stream,
            metadata: self.logged_metadata(&options.metadata),
            error: None,
            bodies: Value::Null,
            guardrails: Vec::new(),
        }
    }

    /// The record of a call that failed with `error` (a refusal by a limit keeps the limit's
    /// code as its status), with the failure of its last attempt counted in the metrics.
    pub(crate) fn failed_record(
        &self,
        base: RequestLogEntry,
        error: &RouterError,
        latency: Duration,
    ) -> RequestLogEntry {
        let last = error.attempts.last();
        if let Some(last) = last {
            self.metrics.observe(&Observation {
                route: &base.route,
                provider: &last.provider,
                model: &last.model,
                ok: false,
                duration_s: latency.as_secs_f64(),
                ttft_s: None,
                input_tokens: 0,
                output_tokens: 0,
            });
        }
        RequestLogEntry {
            provider: last.map(|a| a.provider.clone()),
            model: last.map(|a| a.model.clone()),
            status: match error.code {
                RouterErrorCode::RateLimited => LogStatus::RateLimited,
                RouterErrorCode::BudgetExceeded => LogStatus::BudgetExceeded,
                _ => LogStatus::Error,
            },
            attempts: error.attempts.clone(),
            error: Some(error.message.clone()),
            ..base
        }
    }

    /// The caller's metadata as its row keeps it: none with `bodies = "none"`.
    pub(crate) fn logged_metadata(&self, metadata: &Map<String, Value>) -> Map<String, Value> {
        match self.gateway.log.bodies {
            LogBodies::None => Map::new(),
            _ => metadata.clone(),
        }
    }

    /// The call's bodies as its row keeps them: only with `bodies = "full"`.
    pub(crate) fn logged_bodies(&self, request: &RouterRequest, response: Option<Value>) -> Value {
        if self.gateway.log.bodies != LogBodies::Full {
            return Value::Null;
        }
        serde_json::json!({
            "request": {
                "messages": logged_messages(&request.messages),
                "tools": request.tools,
                "params": request.params,
            },
            "response": response.unwrap_or(Value::Null),
        })
    }
}

/// Messages as the request log keeps them: an image's bytes are not logged, only its type and
/// size (`data:image/png;base64,[1234 bytes]`).
pub(crate) fn logged_messages(messages: &[crate::chat::ChatMessage]) -> Value {
    let mut value = serde_json::to_value(messages).unwrap_or(Value::Null);
    let images = value
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|m| m.get_mut("images").and_then(Value::as_array_mut))
        .flatten();
    for image in images {
        let shown = image["url"].as_str().and_then(|url| {
            let (head, data) = url.split_once(";base64,")?;
            let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
            let bytes = (data.len() / 4 * 3).saturating_sub(padding);
            Some(format!("{head};base64,[{bytes} bytes]"))
        });
        if let Some(shown) = shown {
            image["url"] = Value::String(shown);
        }
    }
    value
}

/// What a running call has committed to, shared by the call and its guard: whether it was
/// admitted past the limits (from then on the upstream may bill), its budget reservation until
/// it is settled, and the channel its text streams through.
#[derive(Default)]
pub(crate) struct Ledger {
    state: Mutex<LedgerState>,
}

#[derive(Default)]
struct LedgerState {
    admitted: bool,
    reservation: Option<CallReservation>,
    deltas: Option<UnboundedSender<String>>,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_deltas(&self, deltas: UnboundedSender<String>) {
        self.lock().deltas = Some(deltas);
    }

    pub(crate) fn deltas(&self) -> Option<UnboundedSender<String>> {
        self.lock().deltas.take()
    }

    pub(crate) fn admit(&self, reservation: Option<CallReservation>) {
        let mut state = self.lock();
        state.admitted = true;
        state.reservation = reservation;
    }

    /// The reservation, for the call to settle with its real cost.
    pub(crate) fn settle(&self) -> Option<CallReservation> {
        self.lock().reservation.take()
    }
}

/// Settles a call whose caller went away (a client disconnected mid-stream, a cancelled
/// turn): dropped while armed, it hands back the budget reservation charged with an estimate of
/// what the upstream billed — the prompt at 4 bytes a token plus the text streamed so far, at
/// the route's highest prices — charges the same tokens to the tokens-per-minute limits, and
/// writes a log record of status `abandoned`. A call refused before admission is charged
/// nothing.
pub(crate) struct Abandonment<'a> {
    pub(crate) router: &'a Router,
    pub(crate) id: Uuid,
    pub(crate) at: chrono::DateTime<chrono::Utc>,
    pub(crate) started: Instant,
    pub(crate) options: &'a CallOptions,
    pub(crate) request: &'a RouterRequest,
    pub(crate) ledger: &'a Ledger,
    pub(crate) stream: bool,
    pub(crate) streamed_bytes: usize,
    pub(crate) armed: bool,
}

/// Bytes per token when a call's usage is unknown (the usual English average).
const BYTES_PER_TOKEN: usize = 4;

impl Drop for Abandonment<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let router = self.router;
        let (admitted, reservation) = {
            let mut state = self.ledger.lock();
            (state.admitted, state.reservation.take())
        };
        let route = router.routes.get(&self.request.route);
        let (tokens_in, tokens_out) = if admitted {
            (
                (prompt_bound(self.request) as usize).div_ceil(BYTES_PER_TOKEN) as u64,
                self.streamed_bytes.div_ceil(BYTES_PER_TOKEN) as u64,
            )
        } else {
            (0, 0)
        };
        let price = route.map(|r| r.most_expensive()).unwrap_or_default();
        let cost = (price.input * tokens_in as f64 + price.output * tokens_out as f64) / 1e6;
        if let Some(reservation) = reservation {
            router.settle_budgets(reservation, cost);
        }
        if admitted {
            let key = self.options.api_key.as_deref();
            router.consume_key_tokens(key, tokens_in + tokens_out);
            if let Some(rate) = route.and_then(|r| r.tokens.as_ref()) {
                rate.consume("", tokens_in + tokens_out);
            }
        }
        tracing::info!(
            request = %self.id,
            route = %self.request.route,
            streamed_bytes = self.streamed_bytes,
            "the caller went away before the call ended"
        );
        if let Some(log) = &router.log {
            let base = router.base_record(
                self.id,
                self.at,
                self.options,
                &self.request.route,
                self.started.elapsed(),
                self.stream,
            );
            log.record(RequestLogEntry {
                status: LogStatus::Abandoned,
                tokens_in,
                tokens_out,
                cost,
                bodies: router.logged_bodies(self.request, None),
                error: Some(format!(
                    "the caller went away before the answer ({} bytes streamed); tokens and \
                     cost are estimates",
                    self.streamed_bytes
                )),
                ..base
            });
        }
    }
}

/// What one image counts as in [`prompt_bound`]: above what the vision APIs charge for one
/// (OpenAI's high detail tops out near 1,100 tokens, Anthropic's near 1,600 after resizing).
pub(crate) const IMAGE_TOKEN_BOUND: usize = 2_000;

/// An upper bound of the request's prompt tokens: every token is at least one byte, plus a
/// margin per message for the chat template, plus [`IMAGE_TOKEN_BOUND`] per image.
pub(crate) fn prompt_bound(request: &RouterRequest) -> u64 {
    let messages: usize = request
        .messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len() + 16)
                    .sum::<usize>()
                + m.images.len() * IMAGE_TOKEN_BOUND
                + 16
        })
        .sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len() + 32)
        .sum();
    (messages + tools + 64) as u64
}

pub(crate) fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
