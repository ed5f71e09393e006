//! A session actor driving the real local model (SmolLM2-135M-Instruct prepared by `stead
//! setup` into `$STEAD_DATA_DIR`) through the `ModelClient` the binary wires.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use stead_actors::session::{Agent, Frame, SessionRegistry};
use stead_actors::{AgentRules, Input, SessionEvent};
use stead_inference::pool::{InferencePool, PoolConfig};
use stead_persistence::{DatabaseUrl, NewSession, StoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answers_with_the_real_model() {
    let data = std::path::PathBuf::from(
        std::env::var_os("STEAD_DATA_DIR").expect("needs STEAD_DATA_DIR prepared by `stead setup`"),
    );
    let pool = InferencePool::start(PoolConfig::new(
        "smollm2-135m-instruct",
        data.join("models/smollm2-135m-instruct"),
        data.join("runtime/libonnxruntime.so"),
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(
        dir.path().join("s.db"),
    )))
    .await
    .unwrap();
    let agent = Agent {
        name: "plain".into(),
        system_prompt: "You are a helpful assistant.".into(),
        rules: AgentRules {
            route: "default".into(),
            max_steps: 2,
            tools: BTreeMap::new(),
            approval_timeout: None,
            dynamic: Vec::new(),
            message_mode: Default::default(),
            schedules: Default::default(),
            callbacks: Default::default(),
            delegation: Default::default(),
            context: Default::default(),
        },
        tools: Default::default(),
        dynamic: None,
        guardrails: None,
    };
    // The session's calls go through the model router, as `stead serve` wires them.
    let routes: Vec<stead_router::config::RouteConfig> =
        serde_json::from_value(serde_json::json!([{
            "name": "default",
            "targets": [{ "provider": "local", "model": "smollm2-135m-instruct", "max_tokens": 48 }],
        }]))
        .unwrap();
    let mut providers = stead_router::Providers::new();
    providers.insert(
        "local".to_string(),
        Some(Arc::new(stead_inference::provider::OnnxProvider::new(
            "local",
            Arc::new(pool),
        )) as Arc<dyn stead_router::Provider>),
    );
    let router = stead_router::Router::new(&routes, Default::default(), &providers, None).unwrap();
    let model = Arc::new(stead_agents::models::SessionModel {
        router: Arc::new(router),
        blobs: None,
    });
    let registry = SessionRegistry::new(store.clone(), model, vec![agent]);
    let id = store
        .create_session(NewSession::for_agent("plain"))
        .await
        .unwrap()
        .id;
    let mut frames = registry.subscribe(id).await.unwrap();
    registry
        .send(
            id,
            Input::UserMessage {
                text: "What is the capital of France?".into(),
                client_id: None,
                mode: None,
                attachments: Vec::new(),
            },
        )
        .await
        .unwrap();
    let mut streamed = String::new();
    let answer = loop {
        match &*tokio::time::timeout(Duration::from_secs(60), frames.recv())
            .await
            .unwrap()
            .unwrap()
        {
            Frame::Delta { text, .. } => streamed.push_str(text),
            Frame::Event { event, .. } => {
                if let SessionEvent::AssistantMessage { text, .. } = event.as_ref() {
                    break text.clone();
                }
            }
            Frame::Progress { .. } => {}
        }
    };
    assert!(answer.contains("Paris"), "{answer}");
    assert_eq!(streamed, answer, "the deltas are the journaled answer");
    let finished = store.read(id, 0, 100).await.unwrap();
    let call = finished
        .iter()
        .find(|e| e.kind == "model_call_finished")
        .unwrap();
    assert_eq!(call.payload["provider"], "local");
    assert!(call.payload["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    registry.stop_all();
    store.shutdown().await;
}
