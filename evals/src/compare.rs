//! Two runs side by side: pass rates, tokens and latency (p50, p99), and per case which
//! flipped — pass→fail first, then fail→pass, then the rest.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::run::CaseResult;

/// One run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFigures {
    pub run: Uuid,
    pub cases: usize,
    pub passed: usize,
    pub pass_rate: f64,
    pub tokens: u64,
    pub cost_usd: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

/// How a case changed from run A to run B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flip {
    /// Passed in A, fails in B.
    Regressed,
    /// Failed in A, passes in B.
    Fixed,
    StillFailing,
    StillPassing,
    /// In one run only.
    OnlyA,
    OnlyB,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseComparison {
    pub case_id: Uuid,
    pub name: String,
    pub flip: Flip,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a: Option<CaseResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<CaseResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub a: RunFigures,
    pub b: RunFigures,
    pub regressed: usize,
    pub fixed: usize,
    pub cases: Vec<CaseComparison>,
}

/// A run's figures from its results.
pub fn figures(run: Uuid, results: &[CaseResult]) -> RunFigures {
    let passed = results.iter().filter(|r| r.passed).count();
    let mut latency: Vec<f64> = results.iter().map(|r| r.latency_ms).collect();
    latency.sort_by(f64::total_cmp);
    RunFigures {
        run,
        cases: results.len(),
        passed,
        pass_rate: if results.is_empty() {
            0.0
        } else {
            passed as f64 / results.len() as f64
        },
        tokens: results.iter().map(|r| r.tokens).sum(),
        cost_usd: results.iter().map(|r| r.cost_usd).sum(),
        latency_p50_ms: percentile(&latency, 0.5),
        latency_p99_ms: percentile(&latency, 0.99),
    }
}

/// `values` sorted ascending; the nearest-rank percentile (0 for none).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// Run A against run B, case by case (matched by case id).
pub fn compare((run_a, a): (Uuid, &[CaseResult]), (run_b, b): (Uuid, &[CaseResult])) -> Comparison {
    let mut cases: Vec<CaseComparison> = Vec::new();
    for ra in a {
        let rb = b.iter().find(|r| r.case_id == ra.case_id);
        let flip = match rb {
            None => Flip::OnlyA,
            Some(rb) => match (ra.passed, rb.passed) {
                (true, false) => Flip::Regressed,
                (false, true) => Flip::Fixed,
                (false, false) => Flip::StillFailing,
                (true, true) => Flip::StillPassing,
            },
        };
        cases.push(CaseComparison {
            case_id: ra.case_id,
            name: ra.name.clone(),
            flip,
            a: Some(ra.clone()),
            b: rb.cloned(),
        });
    }
    for rb in b
        .iter()
        .filter(|rb| !a.iter().any(|ra| ra.case_id == rb.case_id))
    {
        cases.push(CaseComparison {
            case_id: rb.case_id,
            name: rb.name.clone(),
            flip: Flip::OnlyB,
            a: None,
            b: Some(rb.clone()),
        });
    }
    cases.sort_by(|x, y| x.flip.cmp(&y.flip).then_with(|| x.name.cmp(&y.name)));
    Comparison {
        a: figures(run_a, a),
        b: figures(run_b, b),
        regressed: cases.iter().filter(|c| c.flip == Flip::Regressed).count(),
        fixed: cases.iter().filter(|c| c.flip == Flip::Fixed).count(),
        cases,
    }
}
