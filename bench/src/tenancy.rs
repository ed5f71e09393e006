//! `stead bench tenancy`: what projects' virtual keys cost (docs/tenancy.md). On a store with
//! `--projects` projects and `--keys` keys (spread evenly), measured in this process: the
//! authentication of a key through the node's cache (the path of every request) beside a key
//! of the configuration file (the peer: a constant-time comparison of digests), the same on a
//! cache miss (a read by digest), the budgets of a key with the project's (the directory,
//! cached) and one reservation and settlement in the database ledger, a page of the projects
//! and one project's keys. Every figure is taken at a hundredth of the scale too, so that the
//! output says whether it stays flat as keys and projects grow.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use stead_config::Config;
use stead_http::auth::keys::mint;
use stead_http::auth::VirtualKeys;
use stead_http::Auth;
use stead_persistence::tenancy::{KeyRole, KeyRow};
use stead_persistence::{BudgetRequest, JournalStore, StoreOptions};
use stead_router::BudgetDirectory;
use uuid::Uuid;

use crate::cli::TenancyBenchArgs;

/// p50 and p99 of `samples` (microseconds).
fn quantiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.50), at(0.99))
}

/// Times `f` once per sample, in microseconds.
async fn timed<F, Fut>(samples: usize, mut f: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let started = Instant::now();
        f(i).await;
        out.push(started.elapsed().as_secs_f64() * 1e6);
    }
    quantiles(out)
}

/// Projects and keys made straight through the store; the keys' secrets, in order.
async fn populate(
    store: &Arc<dyn JournalStore>,
    projects: usize,
    keys: usize,
) -> anyhow::Result<(Vec<Uuid>, Vec<String>)> {
    let mut ids = Vec::with_capacity(projects);
    for p in 0..projects {
        let project = store.create_project(&format!("bench-{p}")).await?;
        let settings = json!({"budget_usd": 1e9, "budget_period_secs": 86_400});
        store.set_project_settings(project.id, &settings).await?;
        ids.push(project.id);
        if p % 100 == 99 {
            eprintln!("  {} of {projects} projects", p + 1);
        }
    }
    let mut secrets = Vec::with_capacity(keys);
    for k in 0..keys {
        let minted = mint();
        let now = chrono::DateTime::from_timestamp_micros(chrono::Utc::now().timestamp_micros())
            .unwrap_or_default();
        store
            .create_key(&KeyRow {
                id: Uuid::now_v7(),
                project_id: ids[k % projects],
                name: format!("key-{k}"),
                role: KeyRole::Member,
                prefix: minted.prefix,
                digest: minted.digest,
                routes: None,
                budget_usd: Some(1e6),
                budget_period_secs: Some(86_400),
                rpm: None,
                tpm: None,
                expires_at: None,
                revoked_at: None,
                rotated_from: None,
                created_at: now,
            })
            .await?;
        secrets.push(minted.secret);
        if k % 1000 == 999 {
            eprintln!("  {} of {keys} keys", k + 1);
        }
    }
    Ok((ids, secrets))
}

/// The figures at one scale.
async fn measure(
    store: &Arc<dyn JournalStore>,
    projects: usize,
    keys: usize,
    samples: usize,
) -> anyhow::Result<serde_json::Value> {
    eprintln!("tenancy: {projects} projects, {keys} keys");
    let (project_ids, secrets) = populate(store, projects, keys).await?;
    let config_key = "a-configuration-file-key-0123456789";
    let auth = Auth::new(&[config_key.to_string()], vec![7; 32]);
    let config = timed(samples, |_| {
        let principal = auth.authenticate(Some(config_key));
        async move {
            principal.expect("the configuration's key");
        }
    })
    .await;
    let keys_cache = VirtualKeys::new(store.clone());
    for secret in &secrets {
        keys_cache.authenticate(secret).await.expect("a key");
    }
    let cached = timed(samples, |i| {
        let (keys_cache, secret) = (&keys_cache, &secrets[i * 7919 % secrets.len()]);
        async move {
            keys_cache.authenticate(secret).await.expect("a key");
        }
    })
    .await;
    let cold = timed(samples.min(2000), |i| {
        let secret = &secrets[i * 7919 % secrets.len()];
        async move {
            VirtualKeys::new(store.clone())
                .authenticate(secret)
                .await
                .expect("a key");
        }
    })
    .await;
    // The budgets of a call: the key's and its project's, read through the cache, then one
    // reservation and its settlement in the database ledger.
    let limits_keys: Vec<String> = {
        let mut out = Vec::new();
        for secret in &secrets {
            if let stead_http::Principal::ProjectKey(key) =
                keys_cache.authenticate(secret).await.expect("a key")
            {
                out.push(format!("key:{}", key.id));
            }
        }
        out
    };
    for api_key in &limits_keys {
        keys_cache.budgets(api_key).await?;
    }
    let budgets = timed(samples, |i| {
        let (keys_cache, api_key) = (&keys_cache, &limits_keys[i * 7919 % limits_keys.len()]);
        async move {
            assert_eq!(keys_cache.budgets(api_key).await.expect("budgets").len(), 2);
        }
    })
    .await;
    let node = format!("bench:{}", Uuid::now_v7());
    let ledger = timed(samples.min(2000), |i| {
        let request = BudgetRequest {
            key: format!("budget:key:{}", limits_keys[i * 7919 % limits_keys.len()]),
            node_id: node.clone(),
            amount: 0.001,
            budget: 1e6,
            window: std::time::Duration::from_secs(86_400),
            node_ttl: None,
        };
        async move {
            match store.reserve_budget(&request).await.expect("reserve") {
                stead_persistence::BudgetDecision::Reserved(id) => {
                    store.settle_budget(id, 0.0005).await.expect("settle");
                }
                other => panic!("refused: {other:?}"),
            }
        }
    })
    .await;
    // A page of 100 projects (what `GET /v1/projects` answers), from a name anywhere in the list.
    let list_projects = timed(200, |i| {
        let after = format!("bench-{}", i * 7919 % projects);
        async move {
            let page = store.list_projects(Some(&after), 100).await.expect("list");
            assert!(page.len() <= 100);
        }
    })
    .await;
    let list_keys = timed(200, |i| {
        let project = project_ids[i % project_ids.len()];
        async move {
            store.list_keys(project).await.expect("keys");
        }
    })
    .await;
    let pair = |(p50, p99): (f64, f64)| json!({"p50_us": p50, "p99_us": p99});
    Ok(json!({
        "projects": projects,
        "keys": keys,
        "config_key_auth": pair(config),
        "virtual_key_auth_cached": pair(cached),
        "virtual_key_auth_added_p99_us": cached.1 - config.1,
        "virtual_key_auth_cache_miss": pair(cold),
        "budgets_of_a_key_cached": pair(budgets),
        "ledger_reserve_and_settle": pair(ledger),
        "list_projects": pair(list_projects),
        "list_keys_of_a_project": pair(list_keys),
    }))
}

pub async fn tenancy(config: Config, args: TenancyBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.projects >= 1 && args.keys >= args.projects,
        "--keys must be at least --projects, and both at least 1"
    );
    let mut scales = Vec::new();
    for (projects, keys) in [
        ((args.projects / 100).max(1), (args.keys / 100).max(1)),
        (args.projects, args.keys),
    ] {
        let database = crate::BenchDatabase::create(&config, args.backend).await?;
        let store = stead_persistence::open(StoreOptions::new(database.url.clone())).await?;
        let figures = measure(&store, projects, keys, args.samples).await;
        store.shutdown().await;
        database.remove().await?;
        scales.push(figures?);
    }
    let ratio = |field: &str| {
        scales[1][field]["p99_us"].as_f64().unwrap_or(0.0)
            / scales[0][field]["p99_us"].as_f64().unwrap_or(1.0).max(1e-9)
    };
    let report = json!({
        "backend": format!("{:?}", args.backend).to_lowercase(),
        "small": scales[0],
        "full": scales[1],
        "p99_full_over_small": {
            "virtual_key_auth_cached": ratio("virtual_key_auth_cached"),
            "virtual_key_auth_cache_miss": ratio("virtual_key_auth_cache_miss"),
            "budgets_of_a_key_cached": ratio("budgets_of_a_key_cached"),
            "ledger_reserve_and_settle": ratio("ledger_reserve_and_settle"),
            "list_keys_of_a_project": ratio("list_keys_of_a_project"),
        },
    });
    if args.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}
