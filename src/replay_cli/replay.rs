//! `stead replay state|export|import|fork`: a session's folded state at a seq, JSON-lines
//! export and import, and forks.

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde_json::json;
use stead_actors::replay::{self, Export};
use stead_actors::Overrides;
use stead_persistence::{JournalStore, SessionStore};

use super::artifacts;
use super::output::print_json;
use super::{ExportArgs, ForkArgs, ImportArgs, StateArgs};
use stead_config::Config;

pub(super) async fn state(store: &dyn SessionStore, args: StateArgs) -> anyhow::Result<()> {
    let row = store.get_session(args.id).await?;
    let at = args.at.unwrap_or(row.last_seq);
    if at < 1 || at > row.last_seq {
        bail!(
            "--at must be between 1 and the session's last seq ({})",
            row.last_seq
        );
    }
    let folded = replay::fold_until(store, args.id, at).await?;
    print_json(&replay::state_view(args.id, &folded))
}

fn agent_hash(config: &Config, agent: &str) -> Option<String> {
    config
        .agents
        .iter()
        .find(|a| a.name == agent)
        .map(stead_agents::config_hash)
}

pub(super) async fn export(
    config: &Config,
    store: &dyn JournalStore,
    args: ExportArgs,
) -> anyhow::Result<()> {
    let row = store.get_session(args.id).await?;
    let header = replay::export_header(store, &row, agent_hash(config, &row.agent)).await?;
    let mut out: Box<dyn std::io::Write + Send> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let written = replay::write_export(store, &header, &mut *out).await?;
    let artifacts = artifacts::export(config, store, &header, &mut *out).await?;
    out.flush()?;
    eprintln!(
        "exported {} ({written} events, {artifacts} artifacts)",
        row.id
    );
    Ok(())
}

pub(super) fn read_export(path: &PathBuf) -> anyhow::Result<Export> {
    let parsed = if path.as_os_str() == "-" {
        replay::parse_export(std::io::stdin().lock())
    } else {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        replay::parse_export(std::io::BufReader::new(file))
    };
    parsed.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

pub(super) async fn import(
    config: &Config,
    store: &dyn JournalStore,
    args: ImportArgs,
) -> anyhow::Result<()> {
    let mut export = read_export(&args.file)?;
    let agent = &export.header.agent;
    let Some(current) = agent_hash(config, agent) else {
        bail!(
            "{}: the session's agent `{agent}` is not configured here (configured: {})",
            args.file.display(),
            config
                .agents
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    if export.header.agent_config_hash.as_deref() != Some(current.as_str()) {
        eprintln!(
            "stead: note: agent `{agent}` is configured differently here than where the session was recorded; `stead replay check` shows whether its decisions differ"
        );
    }
    // The artifacts' bytes are stored first (content-addressed: harmless if the import then
    // fails), under new ids the imported messages name.
    export.renumber_artifacts(uuid::Uuid::now_v7);
    let blobs = artifacts::store_blobs(config, &export).await?;
    let row = replay::import(store, &export).await?;
    artifacts::insert_rows(store, row.id, &export, blobs).await?;
    if args.json {
        print_json(&json!({
            "id": row.id,
            "imported_from": export.header.session_id,
            "agent": row.agent,
            "status": row.status,
            "last_seq": row.last_seq,
        }))
    } else {
        println!("{}", row.id);
        eprintln!(
            "imported {} as {} ({} events, {})",
            export.header.session_id,
            row.id,
            row.last_seq,
            row.status.as_str()
        );
        Ok(())
    }
}

pub(super) async fn fork(
    config: &Config,
    store: &dyn SessionStore,
    args: ForkArgs,
) -> anyhow::Result<()> {
    if let Some(route) = &args.route {
        if !config.routes.iter().any(|r| &r.name == route) {
            bail!("--route: no route is named `{route}`");
        }
    }
    let system_prompt = args
        .system_prompt_file
        .as_ref()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("--system-prompt-file: cannot read {}", path.display()))
        })
        .transpose()?;
    let source = store.get_session(args.id).await?;
    let overrides = Overrides {
        route: args.route,
        system_prompt,
    };
    let (row, last_seq) = replay::fork(
        store,
        &source,
        args.at,
        overrides,
        stead_actors::LOCAL_PRINCIPAL,
    )
    .await?;
    let status = replay::settle_status(store, row.id).await?.status;
    if args.json {
        print_json(&json!({
            "id": row.id,
            "forked_from": { "session_id": args.id, "at": args.at },
            "agent": row.agent,
            "status": status,
            "last_seq": last_seq,
        }))
    } else {
        println!("{}", row.id);
        eprintln!(
            "forked {} at seq {} as {} ({}); it continues when a server activates it",
            args.id,
            args.at,
            row.id,
            status.as_str()
        );
        Ok(())
    }
}
