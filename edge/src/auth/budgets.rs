//! The budgets of a project's keys, for the model router (docs/tenancy.md): a call charged to a
//! virtual key (`key:{id}`, from a request or from a session the key created) must fit the
//! key's own budget and its project's. Both are read through the node's caches (5 s), so a
//! budget an admin changes holds on this node at once and on the others within seconds; what
//! is spent is in the shared ledger, exact across nodes.

use std::sync::Arc;
use std::time::Duration;

use stead_persistence::tenancy::{Budget, KeyRow, ProjectRow};
use stead_router::{BudgetDirectory, BudgetLimit, KeyRates, LedgerError, NO_RESET};
use uuid::Uuid;

use super::VirtualKeys;

/// The ledger keys of a key's and a project's budgets (apart from the installation's per-key
/// budget, which is kept under the key's own limits key).
pub fn key_budget(id: Uuid) -> String {
    format!("budget:key:{id}")
}

pub fn project_budget(id: Uuid) -> String {
    format!("budget:project:{id}")
}

fn window(budget: &Budget) -> Duration {
    budget
        .period_secs
        .and_then(|secs| u64::try_from(secs).ok())
        .filter(|secs| *secs > 0)
        .map_or(NO_RESET, Duration::from_secs)
}

fn ledger_error(error: stead_persistence::Error) -> LedgerError {
    LedgerError(Box::new(error))
}

impl VirtualKeys {
    /// A key by id, through the cache.
    pub(crate) async fn key(&self, id: Uuid) -> Result<Option<Arc<KeyRow>>, LedgerError> {
        if let Some(row) = self.by_id.get(&id) {
            return Ok(row);
        }
        let row = self
            .store
            .key_by_id(id)
            .await
            .map_err(ledger_error)?
            .map(Arc::new);
        self.by_id.put(id, row.clone());
        Ok(row)
    }

    /// A project by id, through the cache.
    pub(crate) async fn project(&self, id: Uuid) -> Result<Arc<ProjectRow>, LedgerError> {
        if let Some(row) = self.projects.get(&id) {
            return Ok(row);
        }
        let row = Arc::new(self.store.project_by_id(id).await.map_err(ledger_error)?);
        self.projects.put(id, row.clone());
        Ok(row)
    }
}

#[async_trait::async_trait]
impl BudgetDirectory for VirtualKeys {
    /// A virtual key's own `rpm` and `tpm` (through the node's key cache).
    async fn rates(&self, api_key: &str) -> Result<KeyRates, LedgerError> {
        let Some(id) = api_key
            .strip_prefix("key:")
            .and_then(|id| Uuid::try_parse(id).ok())
        else {
            return Ok(KeyRates::default());
        };
        Ok(match self.key(id).await? {
            Some(key) => KeyRates {
                requests_per_min: key.rpm.and_then(|n| u32::try_from(n).ok()),
                tokens_per_min: key.tpm.and_then(|n| u64::try_from(n).ok()),
            },
            None => KeyRates::default(),
        })
    }

    async fn budgets(&self, api_key: &str) -> Result<Vec<BudgetLimit>, LedgerError> {
        // A project's signed-in people (`user:{project}:{name}`) spend from its budget.
        if let Some(project) = api_key
            .strip_prefix("user:")
            .and_then(|rest| rest.split_once(':'))
            .and_then(|(id, _)| Uuid::try_parse(id).ok())
        {
            let project = self.project(project).await?;
            return Ok(project
                .budget()
                .map(|budget| BudgetLimit {
                    key: project_budget(project.id),
                    name: format!("project `{}`", project.name),
                    usd: budget.usd,
                    window: window(&budget),
                    alert_usd: self.alert_share.map(|share| budget.usd * share),
                })
                .into_iter()
                .collect());
        }
        let Some(id) = api_key
            .strip_prefix("key:")
            .and_then(|id| Uuid::try_parse(id).ok())
        else {
            return Ok(Vec::new());
        };
        let Some(key) = self.key(id).await? else {
            return Ok(Vec::new());
        };
        let project = self.project(key.project_id).await?;
        let mut limits = Vec::new();
        if let Some(budget) = key.budget() {
            limits.push(BudgetLimit {
                key: key_budget(key.id),
                name: format!("key `{}`", key.name),
                usd: budget.usd,
                window: window(&budget),
                alert_usd: self.alert_share.map(|share| budget.usd * share),
            });
        }
        if let Some(budget) = project.budget() {
            limits.push(BudgetLimit {
                key: project_budget(project.id),
                name: format!("project `{}`", project.name),
                usd: budget.usd,
                window: window(&budget),
                alert_usd: self.alert_share.map(|share| budget.usd * share),
            });
        }
        Ok(limits)
    }
}
