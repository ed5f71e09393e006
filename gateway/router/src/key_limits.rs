//! A virtual key's own requests and tokens per minute (docs/tenancy.md, "Rate limits"): the
//! [`BudgetDirectory`] says what a key's are (its `rpm` and `tpm`), and each node keeps a
//! limiter per key — the same GCRA and token bucket as the installation's per-key limits
//! (`[gateway.limits]`), with the key's own quota; a changed quota starts a fresh limiter.
//! Checked before the cache, beside the installation's limits (both must admit a call).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use uuid::Uuid;

use crate::limits::{KeyRates, RequestRate, TokenRate};
use crate::{Router, RouterError, RouterErrorCode};

/// One key's limiters, at the rates they were made for.
pub(crate) struct KeyLimit {
    rates: KeyRates,
    requests: Option<RequestRate>,
    tokens: Option<TokenRate>,
}

/// Every key's limiters on this node.
#[derive(Default)]
pub(crate) struct KeyLimits {
    keys: Mutex<HashMap<String, Arc<KeyLimit>>>,
}

impl KeyLimits {
    /// `key`'s limiters at `rates` (made again when the rates changed); `None` without any.
    fn at(&self, key: &str, rates: KeyRates) -> Option<Arc<KeyLimit>> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if rates == KeyRates::default() {
            keys.remove(key);
            return None;
        }
        if let Some(limit) = keys.get(key).filter(|l| l.rates == rates) {
            return Some(limit.clone());
        }
        let limit = Arc::new(KeyLimit {
            rates,
            requests: rates.requests_per_min.map(RequestRate::direct),
            tokens: rates.tokens_per_min.map(TokenRate::new),
        });
        keys.insert(key.to_string(), limit.clone());
        Some(limit)
    }

    fn get(&self, key: &str) -> Option<Arc<KeyLimit>> {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.get(key).cloned()
    }
}

fn limited(id: Uuid, key: &str, limit: &str, wait: Duration) -> RouterError {
    RouterError {
        id,
        code: RouterErrorCode::RateLimited,
        message: format!("API key `{key}` is over its own {limit}"),
        unquoted: None,
        retry_after: Some(wait),
        attempts: Vec::new(),
        budget: None,
    }
}

impl Router {
    /// The key's own requests and tokens per minute, from the directory: a call is taken
    /// from its request rate and starts while its token balance is positive. A directory that
    /// cannot answer refuses the call, as for budgets.
    pub(crate) async fn check_key_limits(
        &self,
        id: Uuid,
        key: Option<&str>,
    ) -> Result<(), RouterError> {
        let (Some(directory), Some(key)) = (&self.directory, key) else {
            return Ok(());
        };
        let rates = directory.budgets.rates(key).await.map_err(|problem| {
            crate::spend::refusal(
                id,
                RouterErrorCode::Unavailable,
                format!("the key's limits cannot be read ({problem})"),
                Duration::from_secs(1),
            )
        })?;
        let Some(limit) = self.key_limits.at(key, rates) else {
            return Ok(());
        };
        if let Some(rate) = &limit.requests {
            rate.check("")
                .map_err(|wait| limited(id, key, "requests per minute", wait))?;
        }
        if let Some(rate) = &limit.tokens {
            rate.check("")
                .map_err(|wait| limited(id, key, "tokens per minute", wait))?;
        }
        Ok(())
    }

    /// Takes the tokens a call used from its key's balances: the installation's per-key one
    /// and the key's own.
    pub(crate) fn consume_key_tokens(&self, key: Option<&str>, tokens: u64) {
        let Some(key) = key else {
            return;
        };
        if let Some(rate) = &self.key_tokens {
            rate.consume(key, tokens);
        }
        if let Some(limit) = self.key_limits.get(key) {
            if let Some(rate) = &limit.tokens {
                rate.consume("", tokens);
            }
        }
    }
}
