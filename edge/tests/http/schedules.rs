//! Schedules over REST and the WebSocket (docs/schedules.md): create (201, then 200 for the
//! same definition, 409 for another), list, cancel, the operator's due index; bad definitions
//! refused with a code and nothing journaled; and a delay that fires once into a turn, seen on
//! the WebSocket.

use std::sync::Arc;

use serde_json::{json, Value};
use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;

fn kinds(journal: &[Value]) -> Vec<&str> {
    journal.iter().filter_map(|e| e["kind"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_over_rest_fire_once_into_a_turn() {
    let model = ScriptedModel::respond(|_| ("Reminded.".to_string(), vec![]));
    let app = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    let (id, token) = app.create("ops").await;
    let path = format!("/v1/sessions/{id}/schedules");
    let remind = json!({"key": "remind", "message": {"text": "stand up"}, "delay_secs": 2});
    let mut ws = app.ws(&id, &token, "").await;

    let (status, created) = app.call("POST", &path, Some(remind.clone())).await;
    assert_eq!(status, 201, "{created}");
    let next_due = created["next_due_at"].as_str().unwrap().to_string();
    let mut want = json!({
        "key": "remind", "kind": "delay", "delay_secs": 2, "message": {"text": "stand up"},
        "catch_up": "one", "fired": 0, "status": "pending",
    });
    want["created_at"] = created["created_at"].clone();
    want["next_due_at"] = json!(next_due);
    assert_eq!(created, want);
    let created_at =
        chrono::DateTime::parse_from_rfc3339(created["created_at"].as_str().unwrap()).unwrap();
    let due_at = chrono::DateTime::parse_from_rfc3339(&next_due).unwrap();
    assert_eq!(due_at - created_at, chrono::Duration::seconds(2));

    // The same definition again: 200, nothing journaled. Another: 409, unless replaced.
    let journaled = app.journal(&id).await.len();
    let (status, again) = app.call("POST", &path, Some(remind.clone())).await;
    assert_eq!((status, &again), (200, &created));
    let mut other = remind.clone();
    other["delay_secs"] = json!(30);
    let (status, body) = app.call("POST", &path, Some(other.clone())).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("schedule_conflict")),
        "{body}"
    );

    // Bad definitions: a code, nothing journaled.
    let bad = [
        (
            json!({"key": "k", "message": {"text": "x"}}),
            "invalid_schedule",
        ),
        (
            json!({"key": "k", "message": {"text": "x"}, "cron": "every day"}),
            "invalid_schedule",
        ),
        (
            json!({"key": "k", "message": {"text": "x"}, "cron": "0 9 * * *", "tz": "Europe/Pariss"}),
            "invalid_schedule",
        ),
        (
            json!({"key": "k", "message": {"text": "x"}, "at": "2001-01-01T00:00:00Z"}),
            "invalid_schedule",
        ),
        (
            json!({"key": "k", "message": {"text": "x"}, "every_secs": 0}),
            "invalid_schedule",
        ),
        (
            json!({"key": "k", "message": {"text": "x"}, "delay_secs": 5, "every_secs": 60}),
            "invalid_schedule",
        ),
        (
            json!({"key": "no spaces", "message": {"text": "x"}, "delay_secs": 5}),
            "invalid_schedule",
        ),
        (
            json!({"key": "k", "message": {"text": "x"}, "delay_secs": 5, "catch_up": "some"}),
            "invalid_request",
        ),
        (
            json!({"key": "k", "message": {"text": "x"}, "delay_secs": 5, "kind": "delay"}),
            "invalid_request",
        ),
        (
            json!({"key": "k", "message": {"text": " "}, "delay_secs": 5}),
            "invalid_request",
        ),
        (json!({"key": "k", "delay_secs": 5}), "invalid_request"),
        (
            json!({"key": "k", "message": {"callback": "nope"}, "delay_secs": 5}),
            "invalid_schedule",
        ),
        (
            json!({"key": "k", "message": {}, "delay_secs": 5}),
            "invalid_schedule",
        ),
    ];
    for (body, code) in bad {
        let (status, answer) = app.call("POST", &path, Some(body.clone())).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (422, &json!(code)),
            "{body} → {answer}"
        );
    }
    assert_eq!(
        app.journal(&id).await.len(),
        journaled,
        "refusals journal nothing"
    );

    // A second schedule, cancelled.
    let hourly = json!({"key": "hourly", "message": {"text": "status?"}, "cron": "0 * * * *", "tz": "America/New_York"});
    let (status, _) = app.call("POST", &path, Some(hourly)).await;
    assert_eq!(status, 201);
    let (status, list) = app.call("GET", &path, None).await;
    assert_eq!(status, 200);
    let keys: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["remind", "hourly"]);

    // The operator's view of the due index; a session token may not read it.
    let (status, due) = app.call("GET", "/v1/schedules?limit=10", None).await;
    assert_eq!(status, 200, "{due}");
    let rows = due["schedules"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["key"], "remind");
    assert_eq!(rows[0]["kind"], "delay");
    assert_eq!(rows[0]["session_id"], json!(id));
    assert_eq!(rows[0]["next_due_at"], created["next_due_at"]);
    let (status, due) = app
        .call(
            "GET",
            &format!("/v1/schedules?due_before={}", urlencode(&next_due)),
            None,
        )
        .await;
    assert_eq!(
        (status, due["schedules"].as_array().unwrap().len()),
        (200, 1),
        "{due}"
    );
    let (status, body) = app
        .call_as("GET", "/v1/schedules", None, Some(&token))
        .await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("forbidden")));
    let (status, body) = app
        .call("GET", "/v1/schedules?due_before=tomorrow", None)
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_query"))
    );

    let (status, _) = app
        .call_as("DELETE", &format!("{path}/hourly"), None, Some(&token))
        .await;
    assert_eq!(status, 200);
    let (status, body) = app.call("DELETE", &format!("{path}/hourly"), None).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("schedule_not_found"))
    );

    // The delay fires once: `schedule_fired`, then its message starts a turn.
    let frames = ws.until_event("turn_finished").await;
    let events = stead_testkit::client::events(&frames);
    let fired = events
        .iter()
        .find(|e| e["kind"] == "schedule_fired")
        .unwrap();
    assert_eq!(fired["payload"]["key"], "remind");
    assert_eq!(fired["payload"]["due_at"], created["next_due_at"]);
    assert_eq!(fired["payload"]["next_due_at"], Value::Null);
    let journal = app.journal(&id).await;
    assert_eq!(
        kinds(&journal),
        [
            "session_created",
            "schedule_created",
            "schedule_created",
            "schedule_cancelled",
            "schedule_fired",
            "user_message",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished",
        ]
    );
    assert_eq!(
        journal[3]["payload"],
        json!({"key": "hourly", "reason": "cancelled by the session's user"})
    );
    assert_eq!(
        journal[5]["payload"],
        json!({"text": "stand up", "client_id": null, "schedule": "remind"})
    );
    let (_, list) = app.call("GET", &path, None).await;
    assert_eq!(list["schedules"][0]["status"], "done");
    assert_eq!(list["schedules"][0]["fired"], 1);
    let (_, due) = app.call("GET", "/v1/schedules", None).await;
    assert_eq!(due["schedules"], json!([]), "nothing left in the due index");

    // Closing the session cancels what it still holds.
    let (status, _) = app
        .call(
            "POST",
            &path,
            Some(json!({"key": "later", "message": {"text": "x"}, "every_secs": 3600})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, _) = app
        .call("DELETE", &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    let journal = app.journal(&id).await;
    assert_eq!(
        kinds(&journal[journal.len() - 2..]),
        ["session_closed", "schedule_cancelled"]
    );
    let (_, due) = app.call("GET", "/v1/schedules", None).await;
    assert_eq!(due["schedules"], json!([]));
}

fn urlencode(text: &str) -> String {
    text.replace(':', "%3A").replace('+', "%2B")
}

/// The sessions of agent `ops`.
async fn ops_sessions(app: &App) -> Vec<Value> {
    let (status, page) = app
        .call("GET", "/v1/sessions?agent=ops&limit=500", None)
        .await;
    assert_eq!(status, 200, "{page}");
    page["sessions"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_schedule_starts_a_session_per_occurrence() {
    let model = ScriptedModel::respond(|_| ("Tock.".to_string(), vec![]));
    let app = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    let path = "/v1/agents/ops/schedules";
    let tick = json!({"key": "tick", "message": {"text": "tick"}, "every_secs": 1});
    let (status, created) = app.call("POST", path, Some(tick.clone())).await;
    assert_eq!(status, 201, "{created}");
    let mut want = json!({"key": "tick", "kind": "every", "agent": "ops", "every_secs": 1,
                          "message": {"text": "tick"}, "catch_up": "one"});
    want["created_at"] = created["created_at"].clone();
    want["next_due_at"] = created["next_due_at"].clone();
    assert_eq!(created, want);
    let (status, again) = app.call("POST", path, Some(tick.clone())).await;
    assert_eq!((status, &again), (200, &created));
    let mut other = tick.clone();
    other["every_secs"] = json!(5);
    let (status, body) = app.call("POST", path, Some(other)).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("schedule_conflict"))
    );
    let (status, body) = app
        .call("POST", "/v1/agents/nobody/schedules", Some(tick))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("unknown_agent"))
    );
    let (_, token) = app.create("ops").await;
    let (status, body) = app.call_as("GET", path, None, Some(&token)).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("forbidden")));
    let (status, list) = app.call("GET", path, None).await;
    assert_eq!((status, &list), (200, &json!({"schedules": [created]})));

    // Each second starts a session of `ops` whose first message is the schedule's.
    let mut started = Vec::new();
    for _ in 0..100 {
        started = ops_sessions(&app)
            .await
            .into_iter()
            .filter(|s| s["metadata"]["schedule"]["key"] == "tick")
            .collect();
        if started.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(started.len() >= 2, "{started:?}");
    for session in &started {
        let id = session["id"].as_str().unwrap();
        // The session is listed as soon as it exists; its message is journaled just after.
        let mut journal = app.journal(id).await;
        for _ in 0..100 {
            if journal.len() >= 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            journal = app.journal(id).await;
        }
        assert_eq!(journal[0]["kind"], "session_created");
        assert_eq!(journal[1]["kind"], "user_message");
        assert_eq!(journal[1]["payload"]["text"], "tick");
    }

    let (status, body) = app.call("DELETE", &format!("{path}/tick"), None).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"agent": "ops", "key": "tick", "cancelled": true})
        )
    );
    let (status, body) = app.call("DELETE", &format!("{path}/tick"), None).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("schedule_not_found"))
    );
    // An occurrence already starting when it was deleted may still start; none after.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let settled = ops_sessions(&app).await.len();
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    assert_eq!(ops_sessions(&app).await.len(), settled);
    let (_, list) = app.call("GET", path, None).await;
    assert_eq!(list, json!({"schedules": []}));
}
