//! Unit tests of the built-in configuration and its validation.

use super::*;

fn invalid(mutate: impl FnOnce(&mut Config)) -> String {
    let mut config = Config::default();
    config.resolve_defaults();
    mutate(&mut config);
    config.validate().expect_err("must be refused").0
}

#[test]
fn defaults_are_valid_and_loopback() {
    let mut config = Config::default();
    config.resolve_defaults();
    config.validate().unwrap();
    assert!(config.listen_addr().ip().is_loopback());
    assert_eq!(
        config.database_url(),
        DatabaseUrl::Sqlite(PathBuf::from(".stead/stead.db"))
    );
}

#[test]
fn api_keys_are_checked_and_allow_listening_off_loopback() {
    let mut config = Config::default();
    config.resolve_defaults();
    config.server.listen = "0.0.0.0:8787".into();
    assert!(config.validate().is_err());
    config.server.api_keys = vec!["a-long-enough-api-key".into()];
    config.validate().unwrap();
    assert!(invalid(|c| c.server.api_keys = vec!["short".into()]).contains("api_keys[0]"));
    assert!(invalid(|c| c.server.api_keys = vec!["sha256:abc".into()]).contains("64 hex"));
}

/// `server.cors_origins` takes origins only: no `*`, no path, http(s); and an `anthropic`
/// provider needs an http(s) `base_url` like an `openai` one.
#[test]
fn cors_origins_are_origins_and_anthropic_needs_a_base_url() {
    let mut config = Config::default();
    config.resolve_defaults();
    config.server.cors_origins = vec![
        "https://app.example.com".into(),
        "http://localhost:5173".into(),
    ];
    config.validate().unwrap();
    for bad in [
        "*",
        "https://app.example.com/chat",
        "app.example.com",
        "null",
    ] {
        let error = invalid(|c| c.server.cors_origins = vec![bad.into()]);
        assert!(error.contains("server.cors_origins[0]"), "{bad}: {error}");
    }
    let claude = ProviderConfig {
        kind: ProviderKind::Anthropic,
        ..local_embedding_provider()
    };
    let error = invalid(|c| {
        c.providers.push(ProviderConfig {
            name: "claude".into(),
            model_dir: None,
            base_url: None,
            ..claude.clone()
        })
    });
    assert!(error.contains("base_url"), "{error}");
    let mut config = Config::default();
    config.resolve_defaults();
    config.providers.push(ProviderConfig {
        name: "claude".into(),
        model_dir: None,
        base_url: Some("https://api.anthropic.com".into()),
        ..claude
    });
    config.validate().unwrap();
}

/// `[cluster]` needs PostgreSQL, a node id, an http(s) address, a secret variable outside
/// `STEAD_*` and a TTL of at least two heartbeats; each refusal names its key.
#[test]
fn a_cluster_needs_postgres_a_node_id_and_sane_timings() {
    let cluster = ClusterConfig {
        advertise_url: "http://node-a.internal:8787".into(),
        secret_env: "CLUSTER_SECRET".into(),
        heartbeat_secs: 2,
        node_ttl_secs: 10,
        sweep_secs: 2,
    };
    let clustered = |c: &mut Config| {
        c.cluster = Some(cluster.clone());
        c.server.node_id = Some("node-a".into());
        c.database.url = Some("postgres://stead@db/stead".into());
    };
    let mut config = Config::default();
    config.resolve_defaults();
    clustered(&mut config);
    config.validate().unwrap();
    assert!(invalid(|c| {
        clustered(c);
        c.database.url = None;
    })
    .contains("postgres"));
    assert!(invalid(|c| {
        clustered(c);
        c.server.node_id = None;
    })
    .contains("server.node_id"));
    assert!(invalid(|c| {
        clustered(c);
        c.cluster.as_mut().unwrap().advertise_url = "node-a:8787".into();
    })
    .contains("cluster.advertise_url"));
    assert!(invalid(|c| {
        clustered(c);
        c.cluster.as_mut().unwrap().secret_env = "STEAD_CLUSTER_SECRET".into();
    })
    .contains("cluster.secret_env"));
    assert!(invalid(|c| {
        clustered(c);
        c.cluster.as_mut().unwrap().node_ttl_secs = 3;
    })
    .contains("cluster.node_ttl_secs"));
}

/// The prefix cache's keys: on by default (256 MiB, 32 tokens), set per `onnx` provider in
/// TOML, and a minimum of 0 refused with the key named.
#[test]
fn the_prefix_cache_is_configured_per_local_provider() {
    let engine = &Config::default().providers[0].engine;
    assert_eq!(
        (engine.prefix_cache_bytes, engine.prefix_cache_min_tokens),
        (256 << 20, 32)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stead.toml");
    std::fs::write(
        &file,
        "[[providers]]\nname = \"local\"\nkind = \"onnx\"\nprefix_cache_bytes = 0\n\
         prefix_cache_min_tokens = 64\n",
    )
    .unwrap();
    let overrides = Overrides {
        config_file: Some(file),
        listen: None,
        data_dir: Some(dir.path().to_path_buf()),
        database_url: None,
    };
    let config = Config::load(&overrides).unwrap();
    let engine = &config.providers[0].engine;
    assert_eq!(
        (engine.prefix_cache_bytes, engine.prefix_cache_min_tokens),
        (0, 64)
    );
    assert!(
        invalid(|c| c.providers[0].engine.prefix_cache_min_tokens = 0)
            .contains("providers[0].prefix_cache_min_tokens")
    );
}

#[test]
fn cross_references_and_duplicates_are_named() {
    assert!(invalid(|c| c.routes[0].targets[0].provider = "nope".into())
        .contains("routes[0].targets[0].provider"));
    let mut resolved = Config::default();
    resolved.resolve_defaults();
    let next = resolved.providers.len();
    assert!(invalid(|c| {
        let p = c.providers[0].clone();
        c.providers.push(p);
    })
    .contains(&format!("providers[{next}].name")));
    assert!(invalid(|c| {
        c.agents[0].tools[0].kind = ToolKind::Webhook;
        c.agents[0].tools[0].url = None;
    })
    .contains("agents[0].tools[0].url"));
    assert!(invalid(|c| c.providers.push(ProviderConfig {
        name: "remote".into(),
        kind: ProviderKind::Openai,
        model_dir: None,
        base_url: Some("ftp://x".into()),
        api_key_env: None,
        max_answer_mib: None,
        engine: EngineConfig::default(),
    }))
    .contains(&format!("providers[{next}].base_url")));
    assert!(invalid(|c| c.database.max_event_bytes = 0).contains("database.max_event_bytes"));
    assert!(invalid(|c| c.sessions.restart_limit = 0).contains("sessions.restart_limit"));
    assert!(invalid(|c| c.agents[0].approval_timeout_secs = Some(0))
        .contains("agents[0].approval_timeout_secs"));
    assert!(
        invalid(|c| c.agents[0].tools[0].approval = "table = users".into())
            .contains("agents[0].tools[0].approval")
    );
    assert!(
        invalid(|c| c.agents[0].tools[1].ops = Some(vec!["drop".into()]))
            .contains("agents[0].tools[1].ops")
    );
    assert!(
        invalid(|c| c.agents[0].tools[0].ops = Some(vec!["get".into()]))
            .contains("only for kinds \"memory\", \"memory_block\" and \"schedule\"")
    );
    assert!(
        invalid(|c| c.agents[0].tools[1].timings = Some(vec!["at".into()]))
            .contains("agents[0].tools[1].timings: only for kind \"schedule\"")
    );
    let schedule = |c: &mut Config| {
        c.agents[0]
            .tools
            .push(ToolConfig::builtin(ToolKind::Schedule));
    };
    assert!(invalid(|c| {
        schedule(c);
        c.agents[0].tools[4].timings = Some(vec!["hourly".into()]);
    })
    .contains("agents[0].tools[4].timings: a non-empty list of at, delay, cron, every"));
    assert!(invalid(|c| {
        schedule(c);
        c.agents[0].tools[4].ops = Some(vec!["get".into()]);
    })
    .contains("agents[0].tools[4].ops: a non-empty list of create, list, cancel"));
    let delegate = |c: &mut Config, to: Option<&str>| {
        c.agents[0].tools.push(ToolConfig {
            agent: to.map(String::from),
            ..ToolConfig::builtin(ToolKind::Agent)
        });
    };
    assert!(invalid(|c| delegate(c, None)).contains("agents[0].tools[4].agent: required"));
    assert!(invalid(|c| delegate(c, Some("demo"))).contains("cannot delegate to itself"));
    assert!(invalid(|c| delegate(c, Some("nobody"))).contains("no agent is named `nobody`"));
    assert!(
        invalid(|c| c.agents[0].tools[0].agent = Some("demo".into()))
            .contains("agents[0].tools[0].agent: only for kind \"agent\"")
    );
}

/// A tool's kind is one of the kinds Stead has: another word is refused when the file is
/// read, naming the word and the kinds.
#[test]
fn an_unknown_tool_kind_is_refused_with_the_kinds_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stead.toml");
    std::fs::write(
        &file,
        "[[agents]]\nname = \"a\"\nsystem_prompt = \"s\"\n\
         [[agents.tools]]\nname = \"sh\"\nkind = \"shell\"\n",
    )
    .unwrap();
    let overrides = Overrides {
        config_file: Some(file),
        listen: None,
        data_dir: Some(dir.path().to_path_buf()),
        database_url: None,
    };
    let error = Config::load(&overrides).unwrap_err().to_string();
    assert!(error.contains("shell"), "{error}");
    assert!(
        error.contains("memory_block") && error.contains("webhook"),
        "{error}"
    );
    let good = |kind: ToolKind| {
        let toml = format!("kind = \"{kind}\"\nname = \"t\"");
        toml::from_str::<ToolConfig>(&toml).unwrap().kind
    };
    assert_eq!(good(ToolKind::MemoryBlock), ToolKind::MemoryBlock);
    assert_eq!(good(ToolKind::Knowledge), ToolKind::Knowledge);
}

#[test]
fn dumped_configuration_hides_webhook_and_provider_secrets() {
    let mut config = Config::default();
    config.resolve_defaults();
    let hook = ToolConfig {
        url: Some("https://ops:hunter2@hooks.example.com/delete?token=abc123&team=ops".into()),
        ..config.agents[0].tools[0].clone()
    };
    config.agents[0].tools.push(hook);
    config.providers[0].base_url = Some("https://gw.example.com/v1?key=k-999".into());
    let dumped = config.to_redacted_toml();
    for secret in ["hunter2", "abc123", "k-999"] {
        assert!(!dumped.contains(secret), "{secret} in\n{dumped}");
    }
    assert!(dumped.contains("https://ops:***@hooks.example.com/delete?token=***&team=***"));
}

mod fuzz {
    use proptest::prelude::*;
    use stead_testkit::arbitrary;

    use super::*;

    /// A configuration file of the real sections whose values are of any kind.
    fn shaped_file() -> impl Strategy<Value = String> {
        (
            arbitrary::object_with(&[
                "listen",
                "api_keys",
                "allowed_hosts",
                "max_connections",
                "header_timeout_secs",
            ]),
            arbitrary::object_with(&["snapshot_every", "max_queued_messages", "token_ttl_secs"]),
            prop::collection::vec(
                arbitrary::object_with(&["name", "route", "system_prompt", "tools", "max_steps"]),
                0..3,
            ),
            prop::collection::vec(
                arbitrary::object_with(&["name", "kind", "base_url", "api_key_env"]),
                0..3,
            ),
        )
            .prop_filter_map(
                "TOML has no null",
                |(server, sessions, agents, providers)| {
                    let doc = serde_json::json!({
                        "server": server,
                        "sessions": sessions,
                        "agents": agents,
                        "providers": providers,
                    });
                    toml::to_string(&doc).ok()
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any file loads, or is refused with one line that starts with `invalid configuration`
        /// — never a panic.
        #[test]
        fn any_config_file_loads_or_is_refused_in_one_line(
            text in ".{0,200}",
            shaped in shaped_file(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            for (i, content) in [text, shaped].into_iter().enumerate() {
                let file = dir.path().join(format!("stead-{i}.toml"));
                std::fs::write(&file, content).unwrap();
                let overrides = Overrides {
                    config_file: Some(file),
                    listen: None,
                    data_dir: Some(dir.path().to_path_buf()),
                    database_url: None,
                };
                if let Err(ConfigError(message)) = Config::load(&overrides) {
                    prop_assert!(message.starts_with("invalid configuration"), "{message}");
                    prop_assert!(!message.contains('\n'));
                }
            }
        }
    }
}

/// The built-in embedding provider and route come with the defaults, and stay when a file
/// brings its own chat providers, but never shadow an embedding setup of the file's own.
#[test]
fn the_embedding_route_is_added_unless_the_file_has_its_own() {
    let names = |c: &Config| -> (Vec<String>, Vec<String>) {
        (
            c.providers.iter().map(|p| p.name.clone()).collect(),
            c.routes.iter().map(|r| r.name.clone()).collect(),
        )
    };
    let mut config = Config::default();
    config.resolve_defaults();
    assert_eq!(
        names(&config),
        (
            vec!["local".to_string(), "local-embed".into()],
            vec!["default".to_string(), "embed".into()]
        )
    );
    assert_eq!(
        config.providers[1].model_dir,
        Some(config.server.data_dir.join("models/all-minilm-l6-v2"))
    );
    config.resolve_defaults();
    assert_eq!(names(&config).0.len(), 2, "resolving twice adds nothing");

    let mut own = Config::default();
    own.routes.push(RouteConfig {
        name: "embed".into(),
        ..own.routes[0].clone()
    });
    own.resolve_defaults();
    assert_eq!(names(&own).0, ["local"]);
}

#[test]
fn single_sign_on_and_budget_alerts_are_checked() {
    let oidc = || crate::oidc::OidcConfig {
        issuer: "https://login.example.com".into(),
        audience: "stead-api".into(),
        jwks_url: None,
        algorithms: vec!["RS256".into(), "ES256".into()],
        jwks_refetch_secs: 60,
        leeway_secs: 30,
        name_claim: "sub".into(),
        map: vec![crate::oidc::OidcMapping {
            claim: "groups".into(),
            value: "team-a".into(),
            project: Some("team-a".into()),
            role: Some("member".into()),
            installation: false,
        }],
        client_id: None,
    };
    let mut config = Config::default();
    config.resolve_defaults();
    config.server.oidc = Some(oidc());
    config.validate().unwrap();
    let with = |change: fn(&mut crate::oidc::OidcConfig)| {
        invalid(move |c| {
            let mut o = oidc();
            change(&mut o);
            c.server.oidc = Some(o);
        })
    };
    assert!(
        with(|o| o.algorithms = vec!["HS256".into()]).contains("server.oidc: algorithm `HS256`")
    );
    assert!(with(|o| o.issuer = "login.example.com".into()).contains("issuer"));
    assert!(with(|o| o.leeway_secs = 3600).contains("leeway_secs"));
    assert!(with(|o| o.map.clear()).contains("map is empty"));
    assert!(with(|o| o.map[0].installation = true).contains("map[0]"));
    assert!(with(|o| o.map[0].role = Some("owner".into())).contains("map[0].role"));
    assert!(invalid(|c| c.budget_alerts.share = 1.5).contains("budget_alerts.share"));
    assert!(invalid(|c| c.budget_alerts.url = Some("ftp://x".into())).contains("budget_alerts.url"));
}

/// The artifact store takes at least one byte and an S3 store names its bucket.
#[test]
fn the_artifact_store_is_checked() {
    assert!(invalid(|c| c.artifacts.max_bytes = 0).contains("artifacts.max_bytes"));
    assert!(invalid(|c| {
        c.artifacts.store = Some(stead_artifacts::BlobConfig::S3 {
            bucket: " ".into(),
            endpoint: None,
            region: "us-east-1".into(),
            prefix: String::new(),
            access_key_env: "K".into(),
            secret_key_env: "S".into(),
        })
    })
    .contains("artifacts.store.bucket"));
}

/// A route may run guardrails that ask a model, but the route they ask must not run one itself
/// (the check would ask itself), and `approve` stays for agents (no one waits on a gateway
/// call).
#[test]
fn a_routes_model_checks_must_not_ask_themselves_and_approve_stays_with_agents() {
    use stead_guardrails::{GuardrailAction, GuardrailConfig, GuardrailKind};
    let judge = |route: &str| GuardrailConfig {
        route: Some(route.into()),
        rubric: Some("No prices.".into()),
        ..GuardrailConfig::new("no-prices", GuardrailKind::Judge, GuardrailAction::Block)
    };
    let mut config = Config::default();
    config.resolve_defaults();
    let checker = RouteConfig {
        name: "checker".into(),
        ..config.routes[0].clone()
    };
    config.routes.push(checker);
    config.guardrails.push(judge("checker"));
    config.routes[0].guardrails = vec!["no-prices".into()];
    config.validate().unwrap();

    let asks_itself = |c: &mut Config| {
        let last = c.routes.len() - 1;
        c.routes[last].guardrails = vec!["no-prices".into()];
    };
    let mut looped = config.clone();
    asks_itself(&mut looped);
    let problem = looped.validate().expect_err("must be refused").0;
    assert!(problem.contains("guardrails.no-prices.route"), "{problem}");
    assert!(problem.contains("it would ask itself"), "{problem}");

    let mut approving = config.clone();
    approving.guardrails[0].action = GuardrailAction::Approve;
    let problem = approving.validate().expect_err("must be refused").0;
    let key = format!("routes.{}.guardrails", approving.routes[0].name);
    assert!(problem.contains(&key), "{problem}");
    assert!(problem.contains("attach it to agents"), "{problem}");
}
