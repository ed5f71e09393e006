//! Budget alerts (docs/tenancy.md, "Budget alerts"): when a key's or a project's spending in a
//! window reaches `[budget_alerts] share` of its budget, the router sends the alert once — on
//! whichever node settles the call that crossed it — and this posts it to the configured
//! webhook as JSON, trying up to three times (1 s, then 2 s apart). A webhook that cannot be
//! reached is logged; the calls themselves are never held up.

use std::time::Duration;

use serde::Serialize;
use stead_config::BudgetAlertsConfig;
use stead_router::{BudgetAlert, BudgetAlerts};

/// What the webhook receives.
#[derive(Debug, Serialize)]
struct AlertBody<'a> {
    /// Always `budget.alert`.
    r#type: &'static str,
    /// ``key `ci` ``, ``project `acme` ``.
    budget: &'a str,
    /// `budget:key:{id}` or `budget:project:{id}`.
    ledger_key: &'a str,
    usd: f64,
    share: f64,
    spent: f64,
    window_start: chrono::DateTime<chrono::Utc>,
    at: chrono::DateTime<chrono::Utc>,
}

/// Posts alerts to `[budget_alerts] url`.
pub struct WebhookAlerts {
    client: reqwest::Client,
    url: String,
    headers: reqwest::header::HeaderMap,
    timeout: Duration,
}

impl WebhookAlerts {
    /// The webhook of `config`, when it names one; its `headers_env` are read now (a variable
    /// that is not set stops the start, naming it).
    pub fn from_config(config: &BudgetAlertsConfig) -> anyhow::Result<Option<WebhookAlerts>> {
        let Some(url) = &config.url else {
            return Ok(None);
        };
        Ok(Some(WebhookAlerts {
            client: crate::agent::webhook_client()?,
            url: url.clone(),
            headers: crate::agent::headers(&config.headers, &config.headers_env)
                .map_err(|e| anyhow::anyhow!("budget_alerts.{e}"))?,
            timeout: Duration::from_secs_f64(config.timeout_secs),
        }))
    }
}

#[async_trait::async_trait]
impl BudgetAlerts for WebhookAlerts {
    async fn crossed(&self, alert: BudgetAlert) {
        let body = AlertBody {
            r#type: "budget.alert",
            budget: &alert.name,
            ledger_key: &alert.key,
            usd: alert.usd,
            share: if alert.usd > 0.0 {
                alert.alert_usd / alert.usd
            } else {
                1.0
            },
            spent: alert.spent,
            window_start: alert.window_start,
            at: chrono::Utc::now(),
        };
        for attempt in 0..3u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
            }
            let sent = self
                .client
                .post(&self.url)
                .headers(self.headers.clone())
                .timeout(self.timeout)
                .json(&body)
                .send()
                .await;
            match sent {
                Ok(answer) if answer.status().is_success() => {
                    tracing::info!(budget = %alert.name, spent = alert.spent, "budget alert sent");
                    return;
                }
                Ok(answer) => tracing::warn!(budget = %alert.name, status = %answer.status(),
                    attempt, "the budget alert webhook refused the alert"),
                Err(error) => tracing::warn!(budget = %alert.name,
                    error = %stead_config::redact::redact_urls(&error.to_string()),
                    attempt, "the budget alert webhook could not be reached"),
            }
        }
        tracing::error!(budget = %alert.name, "a budget alert was not delivered");
    }
}
