//! `/metrics` stays bounded whatever clients send: request methods outside the standard ones
//! (any token is a valid method, and the middleware sees them before any credential check)
//! count under one label, `OTHER`.

use std::sync::Arc;

use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;

async fn metrics(app: &App) -> String {
    let (status, text) = app.text("/metrics").await;
    assert_eq!(status, 200);
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_methods_share_one_label() {
    let model = ScriptedModel::respond(|_| ("ok".to_string(), vec![]));
    let app = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    app.call("FROBNICATE-0", "/v1/sessions", None).await;
    metrics(&app).await; // so that `/metrics` itself has its series
    let after_one = metrics(&app).await;
    assert!(after_one.contains(r#"method="OTHER""#), "{after_one}");
    for i in 1..500 {
        let method = format!("FROBNICATE-{i}-{}", "X".repeat(200));
        let (status, _) = app.call(&method, "/v1/sessions", None).await;
        assert_eq!(status, 405);
    }
    let after_many = metrics(&app).await;
    assert!(
        !after_many.contains("FROBNICATE"),
        "a client-chosen method became a label"
    );
    assert_eq!(
        after_many.lines().count(),
        after_one.lines().count(),
        "500 invented methods added no series"
    );
}
