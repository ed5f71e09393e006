//! A run: every case of a dataset through the real agent loop, each in its own session — the
//! case's history copied into a new journal, then its messages sent one by one — with the
//! run's overrides (route, system prompt), tools served as the run says ([`crate::tools`]) and
//! approvals decided as recorded (else by the run's rule). Each case's turns are read back from
//! the session's journal, graded and diffed against the recording; results go to the store as
//! each case ends, so a run's progress can be watched.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use stead_actors::session::{Frame, SessionRegistry};
use stead_actors::{ApprovalScope, Decider, Input, Overrides, SessionEvent};
use stead_persistence::evals::{EvalResultRow, EvalRunRow, EvalStatus};
use stead_persistence::{Evals, NewEvent, SessionStore};
use uuid::Uuid;

use crate::case::Case;
use crate::diff::{diff, Step};
use crate::grade::{grade, Grading, Judge, Verdict};
use crate::outcome::{read_turn, TurnOutcome};
use crate::tools::{evaluation_agent, Ledger, Served, Serving, ToolMode};

/// Who an evaluation's sessions are charged to and who decides their approvals.
pub const EVAL_PRINCIPAL: &str = "eval";

/// How an approval that no recorded decision covers is decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalRule {
    Approve,
    #[default]
    Reject,
    /// The case fails (its turn is cancelled).
    Fail,
}

/// What a run changes and how it runs (`POST /v1/evals`, `stead eval run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub tools: ToolMode,
    /// Replay mode: an unmatched call of an idempotent tool runs for real.
    #[serde(default)]
    pub live_idempotent: bool,
    /// Live mode: non-idempotent tools run too.
    #[serde(default)]
    pub side_effects: bool,
    #[serde(default)]
    pub approvals: ApprovalRule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_route: Option<String>,
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// A case's turn that has not ended after this long fails.
    #[serde(default = "default_case_timeout")]
    pub case_timeout_secs: u64,
    /// The file whose agents replaced the configured ones (`stead eval run --agent-config`),
    /// kept with the run for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_config: Option<String>,
}

fn default_concurrency() -> usize {
    1
}

fn default_case_timeout() -> u64 {
    300
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            route: None,
            system_prompt: None,
            tools: ToolMode::Replay,
            live_idempotent: false,
            side_effects: false,
            approvals: ApprovalRule::Reject,
            judge_route: None,
            concurrency: 1,
            case_timeout_secs: default_case_timeout(),
            agent_config: None,
        }
    }
}

/// One turn of a case as the run made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnResult {
    pub user: String,
    pub verdicts: Vec<Verdict>,
    /// Against the recording, call by call (empty without one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<Step>,
    pub outcome: TurnOutcome,
    /// Calls that got "not available in evaluation".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
    /// Calls that ran for real.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live: Vec<String>,
}

/// One case's result, stored as the body of its `eval_results` row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub case_id: Uuid,
    pub name: String,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    pub turns: Vec<TurnResult>,
    /// Why the case could not run (its session could not be made, a turn did not end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
    pub latency_ms: f64,
}

/// Why a run could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] stead_persistence::Error),
    #[error("case {0} cannot be read: {1}")]
    Case(Uuid, String),
    #[error("{0}")]
    Invalid(String),
}

/// What runs cases: the sessions' store and registry, the evaluations' store, a judge.
#[derive(Clone)]
pub struct Runner {
    pub sessions: Arc<dyn SessionStore>,
    pub evals: Arc<dyn Evals>,
    pub registry: Arc<SessionRegistry>,
    pub judge: Option<Arc<dyn Judge>>,
}

impl Runner {
    /// Records a new run of `project`'s `dataset` (status `running`) and returns it with its
    /// cases.
    pub async fn create(
        &self,
        project: Uuid,
        dataset: &str,
        settings: &RunSettings,
    ) -> Result<(EvalRunRow, Vec<(i64, Case)>), RunError> {
        if settings.concurrency == 0 || settings.concurrency > 64 {
            return Err(RunError::Invalid("concurrency is 1 to 64".into()));
        }
        let row = self.evals.get_dataset(project, dataset).await?;
        let mut cases = Vec::new();
        for case in self.evals.dataset_cases(project, dataset).await? {
            let parsed: Case = serde_json::from_value(case.body)
                .map_err(|e| RunError::Case(case.id, e.to_string()))?;
            if self.registry.agent(&parsed.agent).is_none() {
                return Err(RunError::Invalid(format!(
                    "case `{}` runs agent `{}`, which is not configured",
                    parsed.name, parsed.agent
                )));
            }
            cases.push((case.position, parsed));
        }
        let run = EvalRunRow {
            id: Uuid::now_v7(),
            project_id: project,
            dataset: dataset.to_string(),
            dataset_version: row.version,
            settings: serde_json::to_value(settings).unwrap_or_default(),
            status: EvalStatus::Running,
            total: cases.len() as i64,
            done: 0,
            passed: 0,
            error: None,
            created_at: chrono::Utc::now(),
            finished_at: None,
        };
        self.evals.create_eval_run(&run).await?;
        Ok((run, cases))
    }

    /// Runs `cases` for `run`, `settings.concurrency` at a time, storing each result as it
    /// ends and calling `progress(done, passed)`; finishes the run's row. The cases' sessions
    /// are the run's project's, their model calls charged to `payer` (who started the run, as
    /// the router's limits and budgets name callers; [`EVAL_PRINCIPAL`] from the command line).
    pub async fn execute(
        &self,
        run: &EvalRunRow,
        cases: Vec<(i64, Case)>,
        settings: &RunSettings,
        payer: &str,
        progress: impl Fn(usize, usize) + Send + Sync,
    ) -> Result<Vec<CaseResult>, RunError> {
        use futures_util::StreamExt;
        let mut done = 0;
        let mut passed = 0;
        let mut results = Vec::new();
        // Each case stores its own result: the loop below awaits nothing but the stream, so
        // no case is left unpolled while it holds a database connection another one waits for.
        let mut stream = futures_util::stream::iter(cases)
            .map(|(position, case)| async move {
                let result = self.run_case(run, payer, &case, settings).await;
                let row = EvalResultRow {
                    case_id: result.case_id,
                    position,
                    passed: result.passed,
                    body: serde_json::to_value(&result).unwrap_or_default(),
                };
                let stored = self.evals.put_eval_result(run.id, &row).await;
                (result, stored)
            })
            .buffer_unordered(settings.concurrency.max(1));
        while let Some((result, stored)) = stream.next().await {
            if let Err(error) = stored {
                drop(stream);
                let _ = self
                    .evals
                    .finish_eval_run(run.id, EvalStatus::Failed, Some(error.to_string()))
                    .await;
                return Err(error.into());
            }
            done += 1;
            passed += usize::from(result.passed);
            progress(done, passed);
            results.push(result);
        }
        self.evals
            .finish_eval_run(run.id, EvalStatus::Finished, None)
            .await?;
        Ok(results)
    }

    /// One case, start to end; whatever goes wrong is in the result, never a panic.
    pub async fn run_case(
        &self,
        run: &EvalRunRow,
        payer: &str,
        case: &Case,
        settings: &RunSettings,
    ) -> CaseResult {
        let mut result = CaseResult {
            case_id: case.id,
            name: case.name.clone(),
            passed: false,
            session_id: None,
            turns: Vec::new(),
            error: None,
            tokens: 0,
            cost_usd: 0.0,
            latency_ms: 0.0,
        };
        let Some(agent) = self.registry.agent(&case.agent) else {
            result.error = Some(format!("agent `{}` is not configured", case.agent));
            return result;
        };
        let recorded: Vec<_> = case
            .turns
            .iter()
            .filter_map(|t| t.recorded.as_ref())
            .flat_map(|t| t.calls.iter().cloned())
            .collect();
        let serving = Arc::new(Serving {
            mode: settings.tools,
            live_idempotent: settings.live_idempotent,
            side_effects: settings.side_effects,
            recorded,
        });
        let ledger = Arc::new(Ledger::default());
        let id = match self.seed(run, payer, case, settings).await {
            Ok(id) => id,
            Err(error) => {
                result.error = Some(error);
                return result;
            }
        };
        result.session_id = Some(id);
        self.registry.set_session_agent(
            id,
            Arc::new(evaluation_agent(&agent, serving, ledger.clone())),
        );
        let tools: Vec<String> = agent.tools.keys().cloned().collect();
        let mut passed = true;
        for turn in &case.turns {
            let outcome = match self.turn(id, &turn.user, case, settings).await {
                Ok(outcome) => outcome,
                Err(error) => {
                    result.error = Some(error);
                    passed = false;
                    break;
                }
            };
            let how = Grading {
                tools: &tools,
                judge: self.judge.as_deref(),
                judge_route: settings.judge_route.as_deref(),
            };
            let verdicts = grade(turn, &outcome, how).await;
            passed &= verdicts.iter().all(|v| v.passed);
            let served = ledger.take();
            let names = |how: Served| -> Vec<String> {
                served
                    .iter()
                    .filter(|(_, _, s)| *s == how)
                    .map(|(tool, arguments, _)| format!("{tool}({arguments})"))
                    .collect()
            };
            result.tokens += outcome.tokens();
            result.cost_usd += outcome.cost_usd;
            result.latency_ms += outcome.latency_ms;
            result.turns.push(TurnResult {
                user: turn.user.clone(),
                verdicts,
                diff: turn
                    .recorded
                    .as_ref()
                    .map(|r| diff(r, &outcome))
                    .unwrap_or_default(),
                outcome,
                unavailable: names(Served::Unavailable),
                live: names(Served::Live),
            });
        }
        self.registry.stop(id).await;
        self.registry.clear_session_agent(id);
        result.passed = passed && result.error.is_none();
        result
    }

    /// A new session holding the case's history and the run's overrides, tagged with the run.
    async fn seed(
        &self,
        run: &EvalRunRow,
        payer: &str,
        case: &Case,
        settings: &RunSettings,
    ) -> Result<Uuid, String> {
        let mut rows: Vec<NewEvent> = case
            .history
            .iter()
            .map(|e| NewEvent {
                kind: e.kind.clone(),
                payload: e.payload.clone(),
                created_at: e.at,
            })
            .collect();
        let (kind, payload) = SessionEvent::SessionForked {
            from: case
                .source
                .map_or_else(|| format!("case {}", case.id), |s| s.session_id.to_string()),
            at: rows.len() as i64,
            overrides: Overrides {
                route: settings.route.clone(),
                system_prompt: settings.system_prompt.clone(),
            },
            principal: Some(payer.to_string()),
        }
        .to_parts();
        rows.push(NewEvent::new(kind, payload));
        let metadata = json!({ "eval": { "run": run.id, "case": case.id, "name": case.name } });
        let row = stead_actors::replay::create_with_journal(
            self.sessions.as_ref(),
            run.project_id,
            &case.agent,
            metadata,
            rows,
        )
        .await
        .map_err(|e| format!("the case's session could not be made: {e}"))?;
        self.evals
            .tag_eval_session(row.id, run.id)
            .await
            .map_err(|e| format!("the case's session could not be tagged: {e}"))?;
        Ok(row.id)
    }

    /// Sends one message and waits for its turn to end, deciding approvals on the way; reads
    /// the turn back from the journal.
    async fn turn(
        &self,
        id: Uuid,
        user: &str,
        case: &Case,
        settings: &RunSettings,
    ) -> Result<TurnOutcome, String> {
        let failed = |e: stead_actors::session::SessionError| e.to_string();
        let mut frames = self.registry.subscribe(id).await.map_err(failed)?;
        let input = Input::UserMessage {
            text: user.to_string(),
            client_id: None,
            mode: None,
            attachments: Vec::new(),
        };
        let before = self
            .sessions
            .get_session(id)
            .await
            .map_err(|e| e.to_string())?;
        self.registry.send(id, input).await.map_err(failed)?;
        let at_seq = before.last_seq + 1;
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(settings.case_timeout_secs);
        loop {
            let frame = match tokio::time::timeout_at(deadline, frames.recv()).await {
                Err(_) => {
                    return Err(format!(
                        "the turn did not end in {} s",
                        settings.case_timeout_secs
                    ))
                }
                Ok(Some(frame)) => frame,
                // The actor went to sleep or stopped: look again from a fresh subscription.
                Ok(None) => {
                    frames = self.registry.subscribe(id).await.map_err(failed)?;
                    let state = self.registry.state(id).await.map_err(failed)?;
                    if state.turn.is_none() && state.last_seq > at_seq {
                        break;
                    }
                    continue;
                }
            };
            let Frame::Event { event, .. } = &*frame else {
                continue;
            };
            match event.as_ref() {
                SessionEvent::ApprovalRequested {
                    call_id,
                    tool,
                    arguments,
                    ..
                } => {
                    let approved = match recorded_decision(case, tool, arguments)
                        .or_else(|| case.turns.iter().find_map(|t| t.approve()))
                    {
                        Some(approved) => approved,
                        None => match settings.approvals {
                            ApprovalRule::Approve => true,
                            ApprovalRule::Reject => false,
                            ApprovalRule::Fail => {
                                let cancel = Input::Cancel {
                                    reason: format!(
                                        "evaluation: `{tool}` asked for an approval no recording \
                                         covers"
                                    ),
                                };
                                let _ = self.registry.send(id, cancel).await;
                                return Err(format!(
                                    "`{tool}` asked for an approval no recording covers (rule: fail)"
                                ));
                            }
                        },
                    };
                    let decision = Input::Decision {
                        call_id: call_id.clone(),
                        approved,
                        reason: (!approved).then(|| "rejected by the evaluation".into()),
                        decided_by: Decider::Named(EVAL_PRINCIPAL.into()),
                        scope: ApprovalScope::Once,
                        args_hash: None,
                        overspend_usd: None,
                        may_spend: false,
                    };
                    self.registry.send(id, decision).await.map_err(failed)?;
                }
                SessionEvent::TurnFinished { .. }
                | SessionEvent::TurnCancelled { .. }
                | SessionEvent::SessionFailed { .. } => break,
                _ => {}
            }
        }
        let events = self
            .sessions
            .read(id, at_seq - 1, 100_000)
            .await
            .map_err(|e| e.to_string())?;
        Ok(read_turn(&events, at_seq))
    }
}

/// How the recording decided the approval of a call of `tool` with `arguments`.
fn recorded_decision(case: &Case, tool: &str, arguments: &serde_json::Value) -> Option<bool> {
    case.turns
        .iter()
        .filter_map(|t| t.recorded.as_ref())
        .flat_map(|t| t.calls.iter())
        .find(|c| c.tool == tool && &c.arguments == arguments)
        .and_then(|c| c.approval.as_ref())
        .map(|a| a.approved)
}
