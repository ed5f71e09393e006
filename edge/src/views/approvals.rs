//! The approvals a session waits for, as the inbox, a session and a session tree list them:
//! a tool call's, a budget's (a model call a budget refused) and a guardrail's (a tool result
//! an `approve` guardrail holds).

use serde::Serialize;
use stead_model::CallId;
use utoipa::ToSchema;

/// What an approval decides: a tool call, a model call past a budget, or a tool's result an
/// `approve` guardrail holds.
#[derive(Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    Tool,
    Budget,
    Guardrail,
}

/// A tool's result an `approve` guardrail holds, and the verdicts on it.
#[derive(Serialize, ToSchema)]
pub struct HeldResult {
    #[schema(value_type = Object)]
    pub result: serde_json::Value,
    /// Every guardrail's verdict on it (`guardrail_checked`), in order.
    #[schema(value_type = Vec<Object>)]
    pub checks: Vec<stead_guardrails::results::GuardrailCheck>,
}

/// A budget approval's budget, and how far over it the parked model call would go.
#[derive(Serialize, ToSchema)]
pub struct BudgetNeed {
    /// The budget's name (``key `ci` ``, ``project `acme` ``).
    pub name: String,
    pub needed_usd: f64,
}

#[derive(Serialize, ToSchema)]
pub struct PendingApproval {
    pub kind: ApprovalKind,
    /// The tool call's id, or (`kind: budget`) the model call's.
    #[schema(value_type = String)]
    pub call_id: CallId,
    /// The tool (empty for a budget approval).
    pub tool: String,
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    pub args_hash: String,
    pub reason: String,
    /// Set on a budget approval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetNeed>,
    /// Set on a guardrail's approval: the result it holds (`args_hash` is that result's hash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldResult>,
}
