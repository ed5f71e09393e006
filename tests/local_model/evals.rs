//! `stead eval agent` on the default local model: the shipped dataset file's first cases run by
//! the evaluation engine (`stead eval run` in a child process on a scratch data directory) and
//! summarized with the agent-quality figures. What a person would check: every turn ends, no
//! reply is empty or tool-call text (the reply checks guarantee it whatever the model writes),
//! and the figures come from the run's stored results.

use std::process::Command;

use serde_json::Value;
use stead_testkit::stead::{binary, prepared_data_dir};

#[test]
fn stead_eval_agent_runs_the_shipped_dataset_through_the_evaluation_engine() {
    let data = prepared_data_dir();
    let output = Command::new(binary())
        .arg("--data-dir")
        .arg(data.path())
        .args([
            "eval",
            "agent",
            "--limit",
            "2",
            "--json",
            "--concurrency",
            "2",
        ])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["agent"], "demo");
    assert_eq!(summary["cases"], 2, "{summary}");
    assert_eq!(summary["turns"], 2, "{summary}");
    assert_eq!(summary["replies_with_call_text"], 0, "{summary}");
    assert_eq!(summary["empty_replies"], 0, "{summary}");
    assert!(summary["run"].as_str().is_some_and(|r| r.len() == 36));
    assert!(summary["cases_per_minute"].as_f64().unwrap() > 0.0);
    let results = summary["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["calculator/multiply", "calculator/precedence"]);
    for result in results {
        let turn = &result["turns"][0];
        assert_eq!(turn["outcome"]["end"], "completed", "{result}");
        // Graded by the dataset's expectations, each one named.
        let graders: Vec<&str> = turn["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["grader"].as_str().unwrap())
            .collect();
        assert!(graders.contains(&"reply_usable"), "{graders:?}");
        assert!(graders.contains(&"tools [\"calculator\"]"), "{graders:?}");
    }
}
