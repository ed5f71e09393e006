//! Stead's HTTP edge in this process, without the binary: the real axum router of
//! `stead-http` over a real SQLite store and real session actors, with the scripted model
//! double answering. REST requests go through `tower::ServiceExt::oneshot` (no socket);
//! WebSocket tests get the same router served on a loopback port of this process.
//!
//! Its REST methods have the same shape as [`crate::stead::Stead`]'s, so a test can move
//! between the process and the binary without changing what it asserts. Use the binary only
//! where the process matters (crashes, signals, the command line, configuration files).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use serde_json::Value;
use stead_actors::session::{Agent, ModelClient, SessionRegistry};
use stead_actors::AgentRules;
use stead_persistence::{DatabaseUrl, JournalStore, StoreOptions};
use tower::ServiceExt;

use async_trait::async_trait;

use crate::client::Api;

/// A running in-process app; it stops when dropped.
pub struct App {
    router: axum::Router,
    /// `http://127.0.0.1:PORT` of the same router, for WebSocket clients.
    pub base: String,
    /// Sent as the Bearer when a call names no other credential.
    pub api_key: Option<String>,
    pub store: Arc<dyn JournalStore>,
    _stop: tokio::sync::watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

/// The `ops` agent: no tools, route `default`, four model calls per turn.
pub fn ops_agent() -> Agent {
    Agent {
        name: "ops".into(),
        system_prompt: "You are ops.".into(),
        rules: AgentRules {
            route: "default".into(),
            max_steps: 4,
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
    }
}

impl App {
    /// The app with `agents` answered by `model`, on route `default`; `api_keys` as
    /// `server.api_keys` (none: open, as on loopback).
    pub async fn start(agents: Vec<Agent>, model: Arc<dyn ModelClient>, api_keys: &[&str]) -> App {
        Self::start_with(
            agents,
            model,
            api_keys,
            stead_http::Limits::default(),
            stead_http::ServeOptions::default(),
        )
        .await
    }

    /// [`App::start`] with other limits for the router and the loopback server.
    pub async fn start_with(
        agents: Vec<Agent>,
        model: Arc<dyn ModelClient>,
        api_keys: &[&str],
        limits: stead_http::Limits,
        options: stead_http::ServeOptions,
    ) -> App {
        let dir = tempfile::tempdir().unwrap();
        let url = DatabaseUrl::Sqlite(dir.path().join("stead.db"));
        let store = stead_persistence::open(StoreOptions::new(url))
            .await
            .unwrap();
        let sessions = Arc::new(SessionRegistry::new(store.clone(), model, agents));
        // Schedules and approval expiries, as `stead serve` runs them (a quicker poll).
        let scheduler = stead_actors::session::Scheduler::new(
            (*sessions).clone(),
            stead_actors::session::SchedulerOptions {
                poll: std::time::Duration::from_millis(100),
                ..Default::default()
            },
        )
        .spawn();
        let model_router = stead_router::Router::new(
            &[],
            Default::default(),
            &stead_router::Providers::new(),
            None,
        )
        .unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let keys: Vec<String> = api_keys.iter().map(|k| k.to_string()).collect();
        let evals = Arc::new(stead_evals::Runner {
            sessions: store.clone(),
            evals: store.clone(),
            registry: sessions.clone(),
            judge: None,
        });
        let router = stead_http::router(stead_http::AppState::new(stead_http::AppStateParts {
            store: store.clone(),
            sessions,
            auth: Arc::new(stead_http::Auth::new(&keys, vec![7; 32])),
            keys: Arc::new(stead_http::auth::VirtualKeys::new(store.clone())),
            oidc: None,
            routes: Arc::new(vec!["default".into()]),
            limits,
            version: "test",
            shutdown: stopped.clone(),
            connections: Arc::new(tokio::sync::Semaphore::new(1024)),
            session_sockets: Default::default(),
            session_waits: Default::default(),
            metrics: Default::default(),
            model_router: Arc::new(model_router),
            mcp: None,
            cluster: None,
            knowledge: None,
            evals: Some(evals),
            artifacts: None,
            speech: None,
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut until = stopped;
        let mut scheduler_stop = until.clone();
        tokio::spawn(async move {
            let _ = scheduler_stop.wait_for(|stop| *stop).await;
            scheduler.abort();
        });
        tokio::spawn(stead_http::serve(
            listener,
            router.clone(),
            options,
            async move {
                let _ = until.wait_for(|stop| *stop).await;
            },
        ));
        App {
            router,
            base,
            api_key: None,
            store,
            _stop: stop,
            _dir: dir,
        }
    }

    /// A raw body with a content type (for malformed input).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type);
        let request = match &self.api_key {
            Some(key) => request.header("authorization", format!("Bearer {key}")),
            None => request,
        };
        self.send(request.body(Body::from(body)).unwrap()).await
    }

    /// A `GET` whose answer is text (`/metrics`).
    pub async fn text(&self, path: &str) -> (u16, String) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn send(&self, request: Request<Body>) -> (u16, Value) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

#[async_trait]
impl Api for App {
    fn base_url(&self) -> &str {
        &self.base
    }

    fn default_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    async fn call_as(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        bearer: Option<&str>,
    ) -> (u16, Value) {
        let request = Request::builder().method(method).uri(path);
        let request = match bearer {
            Some(bearer) => request.header("authorization", format!("Bearer {bearer}")),
            None => request,
        };
        let request = match body {
            Some(body) => request
                .header("content-type", "application/json")
                .body(Body::from(body.to_string())),
            None => request.body(Body::empty()),
        };
        self.send(request.unwrap()).await
    }
}
