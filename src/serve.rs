//! `stead serve`, `stead migrate` and `stead setup`: the wiring of the crates into a running
//! server — the data directory, the store, the local engines, the router, the agents, the
//! session registry and the HTTP edge.

mod parts;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use stead_agents::engines::{start_embedding_models, start_local_models, stop_local_models};
use stead_agents::models::SessionModel;
use stead_config::{prepare_data_dir, Config};
use stead_http::raise_fd_limit;
use stead_persistence::{JournalStore, Kv, RequestLog, StoreOptions};
use tokio::net::TcpListener;

/// Opens the configured store; with `migrate`, applies pending migrations and reports them.
pub async fn open_store(config: &Config, migrate: bool) -> anyhow::Result<Arc<dyn JournalStore>> {
    let url = config.database_url();
    let mut options = StoreOptions::new(url.clone());
    options.max_event_bytes = config.database.max_event_bytes;
    options.max_connections = config.database.max_connections;
    options.connect_timeout = Duration::from_secs(config.database.connect_timeout_secs);
    options.run_migrations = false;
    let store = stead_persistence::open(options)
        .await
        .map_err(|e| match e {
            stead_persistence::Error::Config(message) => anyhow::anyhow!("database: {message}"),
            other => anyhow::anyhow!("database {}: {other}", url.redacted()),
        })?;
    if migrate {
        let report = store
            .migrate()
            .await
            .map_err(|e| anyhow::anyhow!("database {}: {e}", url.redacted()))?;
        for version in &report.applied {
            tracing::info!(version, "applied migration");
        }
        tracing::info!(
            backend = %store.backend(),
            database = %url.redacted(),
            applied = report.applied.len(),
            schema_version = ?report.current,
            "database ready"
        );
    }
    Ok(store)
}

/// `stead migrate`.
pub async fn migrate(config: Config) -> anyhow::Result<()> {
    prepare_data_dir(&config.server.data_dir)?;
    let store = open_store(&config, false).await?;
    let url = config.database_url();
    let report = store
        .migrate()
        .await
        .map_err(|e| anyhow::anyhow!("database {}: {e}", url.redacted()))?;
    for version in &report.applied {
        println!("applied migration {version}");
    }
    println!(
        "{} database {} is at schema version {} ({} migration(s) applied now)",
        store.backend(),
        url.redacted(),
        report.current.map_or("none".into(), |v| v.to_string()),
        report.applied.len()
    );
    store.shutdown().await;
    Ok(())
}

/// Projects' keys, and the directory and ledger of their budgets: always in the database, so
/// that they hold across restarts — the cluster's ledger, or on a node alone one whose
/// reservations carry a fresh id each run (docs/tenancy.md).
fn key_budgets(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    shared: Option<Arc<dyn stead_router::SharedLedger>>,
    node: &str,
) -> (
    Arc<stead_http::auth::VirtualKeys>,
    stead_agents::models::Directory,
) {
    let alerts = config.budget_alerts.url.is_some();
    let keys = Arc::new(
        stead_http::auth::VirtualKeys::new(store.clone())
            .alerting_at(alerts.then_some(config.budget_alerts.share)),
    );
    let ledger = shared.unwrap_or_else(|| {
        Arc::new(crate::cluster::SharedBudgets {
            store: store.clone(),
            node_id: format!("{node}:{}", uuid::Uuid::now_v7()),
            node_ttl: None,
        })
    });
    let directory = (
        keys.clone() as Arc<dyn stead_router::BudgetDirectory>,
        ledger,
    );
    (keys, directory)
}

/// `stead serve`: runs until SIGINT or SIGTERM, then drains and exits 0.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    prepare_data_dir(&config.server.data_dir)?;
    // The session-token key is checked before anything starts: a bad one stops the start.
    let secret = session_secret(&config.server.data_dir)?;
    // Every WebSocket client holds a socket: take the whole open-file allowance.
    let fds = raise_fd_limit();
    tracing::debug!(open_files = fds, "open-file limit");
    let addr = config.listen_addr();
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("server.listen: cannot listen on {addr}"))?;
    let (pools, embedders, store) = start_backends(&config).await?;
    let local = listener.local_addr()?;
    let node = config
        .server
        .node_id
        .clone()
        .unwrap_or_else(stead_actors::session::default_node_name);
    // A node of a cluster registers before it serves, keeps its heartbeat and sweeps for a
    // dead node's running sessions; its strict budgets are the cluster's (docs/cluster.md).
    let membership = match &config.cluster {
        Some(cluster) => Some(crate::cluster::Membership::new(cluster, &node)?),
        None => None,
    };
    let shared_budgets = membership.as_ref().map(|membership| {
        Arc::new(crate::cluster::SharedBudgets {
            store: store.clone(),
            node_id: node.clone(),
            node_ttl: Some(membership.ttl),
        }) as Arc<dyn stead_router::SharedLedger>
    });
    let (keys, directory) = key_budgets(&config, &store, shared_budgets.clone(), &node);
    let Agents {
        model_router,
        mcp,
        knowledge,
        sessions,
    } = agents(
        &config,
        &store,
        (&pools, &embedders),
        (shared_budgets, Some(directory)),
        node,
    )?;
    let cluster_tasks = match &membership {
        Some(membership) => membership.start(store.clone(), sessions.clone()).await?,
        None => Vec::new(),
    };
    let superseded = membership.as_ref().map(|m| m.superseded.clone());
    let registered = membership.as_ref().map(|m| m.node.clone());
    let peers = match membership {
        Some(membership) => Some(Arc::new(crate::cluster::forward::Peers::new(
            membership,
            store.clone(),
        )?) as Arc<dyn stead_http::cluster::Cluster>),
        None => None,
    };
    let scheduler = start_background(&config, &store, &sessions);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let connections = Arc::new(tokio::sync::Semaphore::new(stead_http::MAX_CONNECTIONS));
    let mcp_inner = stead_agents::mcp::endpoint::Inner::default();
    let state = stead_http::AppState::new(stead_http::AppStateParts {
        store: store.clone(),
        sessions: sessions.clone(),
        auth: auth(&config, secret),
        keys,
        oidc: stead_http::auth::oidc::Oidc::configured(&config.server.oidc, &store)?,
        routes: Arc::new(model_router.route_names()),
        model_router: model_router.clone(),
        limits: stead_http::Limits {
            ws_per_session: config.server.max_websockets_per_session,
            ws_heartbeat: Duration::from_secs(config.server.ws_heartbeat_secs),
            ..Default::default()
        },
        version: env!("CARGO_PKG_VERSION"),
        shutdown: stop_rx.clone(),
        connections: connections.clone(),
        session_sockets: Default::default(),
        session_waits: Default::default(),
        metrics: Default::default(),
        mcp: (!config.mcp_servers.is_empty()).then(|| mcp.clone() as Arc<dyn stead_http::McpView>),
        cluster: peers,
        knowledge: Some(knowledge.clone() as Arc<dyn stead_http::knowledge::KnowledgeApi>),
        evals: parts::evals(&store, &sessions, &model_router),
        artifacts: parts::artifacts(&config)?,
        speech: stead_agents::speech::LocalSpeech::configured(&config).map(|s| s as _),
    });
    let mcp_route = stead_agents::mcp::endpoint::route(mcp_inner.clone(), state.clone());
    let router = stead_http::router_with(state, mcp_route);
    let _ = mcp_inner.set(router.clone());
    let mut signals = ShutdownSignals::install()?;
    announce(&config, local);
    let running = Running {
        store,
        sessions,
        mcp,
        pools,
        scheduler,
        cluster_tasks,
        registered,
    };

    let mut server_stop = stop_rx.clone();
    let options = stead_http::ServeOptions {
        header_timeout: Duration::from_secs(config.server.header_timeout_secs),
        max_connections: config.server.max_connections,
        body_timeout: Duration::from_secs(config.server.body_timeout_secs),
    };
    let server = tokio::spawn(stead_http::serve(listener, router, options, async move {
        let _ = server_stop.wait_for(|stop| *stop).await;
    }));
    tokio::pin!(server);
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    let superseded = tokio::select! {
        result = &mut server => {
            running.stop(None).await;
            return result.context("server task failed")?.context("server failed");
        }
        signal = signals.recv() => {
            tracing::info!(signal, "shutting down");
            false
        }
        () = async {
            match &superseded {
                Some(superseded) => superseded.notified().await,
                None => std::future::pending().await,
            }
        } => {
            tracing::error!("shutting down: another process took this node's id");
            true
        }
    };
    let _ = stop_tx.send(true);
    drain(&connections, grace, server).await?;
    running.stop(Some(grace)).await;
    tracing::info!("stopped");
    anyhow::ensure!(
        !superseded,
        "cluster: another process registered this node's id (server.node_id) while this one's \
         heartbeat had lapsed; this node stopped so that the two do not take each other's sessions"
    );
    Ok(())
}

/// What runs the agents: the model router over the local engines and the configured
/// providers, the MCP servers, the knowledge service and the session registry with every
/// configured agent.
pub(crate) struct Agents {
    pub model_router: Arc<stead_router::Router>,
    pub mcp: Arc<stead_agents::mcp::McpRegistry>,
    pub knowledge: Arc<stead_agents::knowledge::Knowledge>,
    pub sessions: Arc<stead_actors::session::SessionRegistry>,
}

/// Builds [`Agents`] on a started store and engines (`stead serve`, `stead eval run`).
pub(crate) fn agents(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    (pools, embedders): (&Pools, &[stead_agents::engines::EmbeddingModel]),
    ledgers: (
        Option<Arc<dyn stead_router::SharedLedger>>,
        Option<stead_agents::models::Directory>,
    ),
    node: String,
) -> anyhow::Result<Agents> {
    let model_router = stead_agents::models::build(
        config,
        pools,
        embedders,
        Some(store.clone() as Arc<dyn RequestLog>),
        ledgers,
    )?;
    let blobs = parts::blobs(config)?;
    let mcp = parts::mcp(config, store, &blobs)?;
    let knowledge = Arc::new(stead_agents::knowledge::Knowledge::new(
        store.clone(),
        model_router.clone(),
        config.knowledge.clone(),
    ));
    let notes: Arc<dyn Kv> = store.clone();
    let mut agents = stead_agents::build(config, &notes, Some(&mcp), Some(&knowledge))?;
    stead_agents::agent::guard_results(&mut agents, config, &model_router)?;
    let session_model = SessionModel::shared(model_router.clone(), Some(blobs));
    let sessions = Arc::new(
        stead_actors::session::SessionRegistry::new(store.clone(), session_model, agents)
            .with_lifecycle(config.sessions.lifecycle())
            .with_node(node),
    );
    Ok(Agents {
        model_router,
        mcp,
        knowledge,
        sessions,
    })
}

/// The local engines a configuration starts, by provider name.
pub(crate) type Pools = Vec<(String, Arc<stead_inference::pool::InferencePool>)>;

/// A drain: WebSockets flush what is committed and close with a close frame, requests
/// finish — each within `grace`; requests still in flight then are stopped (none may
/// activate a session again once its lease is released).
async fn drain(
    connections: &tokio::sync::Semaphore,
    grace: Duration,
    mut server: std::pin::Pin<&mut tokio::task::JoinHandle<std::io::Result<()>>>,
) -> anyhow::Result<()> {
    if !stead_http::drain_connections(connections, grace).await {
        tracing::warn!(
            ?grace,
            "WebSocket clients still connected after the grace period"
        );
    }
    match tokio::time::timeout(grace, server.as_mut()).await {
        Ok(result) => result
            .context("server task failed")?
            .context("server failed")?,
        Err(_) => {
            tracing::warn!(?grace, "requests still in flight after the grace period");
            server.abort();
        }
    }
    Ok(())
}

/// What runs beside the server: the sessions that were mid-turn resume, the due index's
/// poller fires schedules and approval expiries (docs/schedules.md), and — when configured —
/// old journals are swept. Returns the poller's task.
fn start_background(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    sessions: &Arc<stead_actors::session::SessionRegistry>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(resume_running_sessions(store.clone(), sessions.clone()));
    crate::retention::start(config, store);
    stead_actors::session::Scheduler::new(
        (**sessions).clone(),
        stead_actors::session::SchedulerOptions {
            poll: Duration::from_millis(config.schedules.poll_ms),
            ..Default::default()
        },
    )
    .spawn()
}

/// The local engines, then the store. Models first: a provider that cannot start is a
/// configuration error, reported before the database is touched; what started is stopped
/// again when a later part fails.
pub(crate) async fn start_backends(
    config: &Config,
) -> anyhow::Result<(
    Pools,
    Vec<stead_agents::engines::EmbeddingModel>,
    Arc<dyn JournalStore>,
)> {
    let pools = start_local_models(config).await?;
    let started = async {
        let embedders = start_embedding_models(config).await?;
        let store = open_store(config, true).await?;
        anyhow::Ok((embedders, store))
    };
    match started.await {
        Ok((embedders, store)) => Ok((pools, embedders, store)),
        Err(error) => {
            stop_local_models(&pools).await;
            Err(error)
        }
    }
}

/// The edge's credentials: the configured API keys, the session-token key and its lifetime,
/// the hosts and origins allowed.
fn auth(config: &Config, secret: Vec<u8>) -> Arc<stead_http::Auth> {
    Arc::new(
        stead_http::Auth::new(&config.server.api_keys, secret)
            .allowing_hosts(&config.server.allowed_hosts)
            .allowing_origins(&config.server.cors_origins)
            .with_token_ttl(
                (config.sessions.token_ttl_secs > 0)
                    .then(|| Duration::from_secs(config.sessions.token_ttl_secs)),
            ),
    )
}

/// The "listening" line (what scripts wait for), and a warning when the server is open.
fn announce(config: &Config, local: std::net::SocketAddr) {
    tracing::info!(address = %local, "stead listening");
    println!("stead listening on http://{local}");
    if config.server.api_keys.is_empty() {
        tracing::warn!(
            address = %local,
            "no API keys: the server is open — every process and user of this machine that can \
             reach {local} is an operator (requests are still refused when their Host is not a \
             loopback name or in server.allowed_hosts, or their Origin is another site); set \
             server.api_keys to require credentials"
        );
    }
}

/// What a serving node runs besides the HTTP server, stopped in order at the end.
struct Running {
    store: Arc<dyn JournalStore>,
    sessions: Arc<stead_actors::session::SessionRegistry>,
    mcp: Arc<stead_agents::mcp::McpRegistry>,
    pools: Vec<(String, Arc<stead_inference::pool::InferencePool>)>,
    scheduler: tokio::task::JoinHandle<()>,
    cluster_tasks: Vec<tokio::task::JoinHandle<()>>,
    registered: Option<stead_persistence::ClusterNode>,
}

impl Running {
    /// Stops everything. With `grace` (a drain, not a failure), live sessions first pass
    /// their leases on, so other nodes take them at once, and the node leaves its cluster.
    async fn stop(self, grace: Option<Duration>) {
        self.scheduler.abort();
        for task in &self.cluster_tasks {
            task.abort();
        }
        if let Some(grace) = grace {
            self.sessions.passivate_all(grace).await;
            if let Some(node) = &self.registered {
                if let Err(error) = self.store.leave_cluster(node).await {
                    tracing::warn!(%error, "cluster: cannot leave");
                }
            }
        }
        self.sessions.stop_all();
        self.mcp.shutdown().await;
        stop_local_models(&self.pools).await;
        self.store.shutdown().await;
    }
}

/// After a restart, sessions that were mid-turn (status `running`) carry on by themselves:
/// activation folds the journal and resumes what was in flight (an unfinished model call is
/// issued again; a started tool follows its idempotency policy). Parked and idle sessions stay
/// asleep until something touches them.
async fn resume_running_sessions(
    store: Arc<dyn JournalStore>,
    sessions: Arc<stead_actors::session::SessionRegistry>,
) {
    let mut cursor = None;
    let mut resumed = 0usize;
    loop {
        let query = stead_persistence::SessionQuery {
            scope: stead_persistence::Scope::Installation,
            agent: None,
            parent: None,
            // An evaluation's sessions are not resumed: nobody watches them any more.
            eval_run: None,
            status: Some(stead_persistence::SessionStatus::Running),
            limit: 200,
            cursor,
        };
        let page = match store.list_sessions(&query).await {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(%error, "cannot list running sessions to resume them");
                return;
            }
        };
        for row in &page.sessions {
            match sessions.session(row.id).await {
                Ok(_) => resumed += 1,
                // Another node of the cluster runs it.
                Err(stead_actors::session::SessionError::HeldElsewhere(owner)) => {
                    tracing::debug!(session = %row.id, %owner, "running on another node")
                }
                Err(error) => tracing::warn!(session = %row.id, %error, "cannot resume"),
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if resumed > 0 {
        tracing::info!(sessions = resumed, "resumed sessions that were mid-turn");
    }
}

/// The key that signs session tokens: `{data_dir}/session.key`, made once (32 random bytes,
/// mode 0600) so tokens survive restarts. Nodes sharing a database need the same file.
fn session_secret(data_dir: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("session.key");
    if path.exists() {
        return checked_session_secret(&path);
    }
    // Written aside and linked into place: two servers starting at once agree on one key.
    let mut secret = vec![0u8; 32];
    rand::fill(&mut secret[..]);
    let staging = data_dir.join(format!("session.key.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&staging)
        .with_context(|| format!("cannot write {}", staging.display()))?;
    file.write_all(&secret)?;
    file.sync_all()?;
    let linked = std::fs::hard_link(&staging, &path);
    let _ = std::fs::remove_file(&staging);
    match linked {
        Ok(()) => Ok(secret),
        Err(_) => checked_session_secret(&path),
    }
}

/// The token-signing key that is already there, when it can be trusted: at least 32 bytes
/// (a shorter one lets anyone who knows a session id forge its token) and readable by its
/// owner alone.
fn checked_session_secret(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{}: the session-token key is readable by others (mode {:o}); `chmod 600` it",
            path.display(),
            mode & 0o777
        );
    }
    let key = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if key.len() < 32 {
        anyhow::bail!(
            "{}: the session-token key is {} bytes, it needs at least 32; delete the file to \
             have a new one made (every session token issued so far stops working)",
            path.display(),
            key.len()
        );
    }
    Ok(key)
}

/// SIGINT and SIGTERM, with their handlers installed when this is created — before the
/// server announces itself, so a signal sent right after the "listening" line is never lost
/// to the default disposition (which would kill the process instead of draining it).
struct ShutdownSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

/// `stead setup`: prepares ONNX Runtime and the local model, printing progress.
pub async fn setup(config: Config, args: crate::cli::SetupArgs) -> anyhow::Result<()> {
    prepare_data_dir(&config.server.data_dir)?;
    let options = stead_inference::setup::SetupOptions {
        data_dir: config.server.data_dir.clone(),
        precision: args.precision.parse().map_err(anyhow::Error::msg)?,
        model: args.model,
        gguf: args.gguf,
        model_name: args.name,
        python: args.python,
    };
    let started = std::time::Instant::now();
    let prepared = tokio::task::spawn_blocking(move || {
        stead_inference::setup::run(&options, &mut |line| println!("{line}"))
    })
    .await
    .context("setup task failed")??;
    println!(
        "setup done in {:.1} s: model {} · embedding model {} · speech model {} · runtime {}",
        started.elapsed().as_secs_f64(),
        prepared.model_dir.display(),
        prepared.embedding_dir.display(),
        prepared.speech_dir.display(),
        prepared.runtime_library.display()
    );
    Ok(())
}
