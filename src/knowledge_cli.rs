//! `stead knowledge …` (docs/knowledge.md, "Command line"): add files to a collection, re-embed
//! a collection with another route, query one. The commands work on the configured database
//! directly, embedding through a router built from the configuration (the local embedding
//! model runs in this process), so no server needs to run; a running server sees the changes
//! on its next query (the collection's version moved).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand};
use serde_json::json;
use stead_persistence::{CollectionKey, DEFAULT_PROJECT};

use stead_agents::knowledge::{files, Knowledge};
use stead_config::Config;

#[derive(Debug, Subcommand)]
pub enum KnowledgeCommand {
    /// Add files (plain text, Markdown, HTML) to a collection, one document per file (its id:
    /// the path as given); the collection is created when missing.
    Add(AddArgs),
    /// Embed every chunk of a collection again (another route or model), in one transaction.
    Reembed(ReembedArgs),
    /// Search a collection and print the ranked chunks.
    Query(QueryArgs),
    /// List the collections.
    List,
}

#[derive(Debug, Clone, Args)]
pub struct AddArgs {
    pub collection: String,
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The embedding route of a new collection (default `knowledge.embedding_route`).
    #[arg(long)]
    pub route: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ReembedArgs {
    pub collection: String,
    /// The route to embed through from now on (default: the collection's own).
    #[arg(long)]
    pub route: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct QueryArgs {
    pub collection: String,
    pub text: String,
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// exact, ann or hybrid.
    #[arg(long, default_value = "exact")]
    pub mode: String,
}

/// The service over the configured database and a router of the configured embedding
/// providers (chat models are not started).
async fn service(
    config: &Config,
) -> anyhow::Result<(Knowledge, Arc<dyn stead_persistence::JournalStore>)> {
    let store = crate::serve::open_store(config, true).await?;
    let embedders = stead_agents::engines::start_embedding_models(config).await?;
    let router = stead_agents::models::build(config, &[], &embedders, None, (None, None))?;
    let knowledge = Knowledge::new(store.clone(), router, config.knowledge.clone());
    Ok((knowledge, store))
}

/// The command line works on the default project's collections (the installation's); a
/// project's own are reached over REST with its keys (docs/tenancy.md).
fn key(name: &str) -> CollectionKey {
    CollectionKey::new(DEFAULT_PROJECT, name)
}

fn api(error: stead_http::ApiError) -> anyhow::Error {
    anyhow::anyhow!("{}: {}", error.code.as_str(), error.message)
}

pub async fn run(config: Config, command: KnowledgeCommand) -> anyhow::Result<ExitCode> {
    let (knowledge, store) = service(&config).await?;
    match command {
        KnowledgeCommand::Add(args) => add(&knowledge, args).await?,
        KnowledgeCommand::Reembed(args) => {
            let started = Instant::now();
            let progress = |done: usize, total: usize| {
                eprintln!("re-embedding {}: {done}/{total} chunks", args.collection);
            };
            let row = knowledge
                .reembed(&key(&args.collection), args.route.as_deref(), &progress)
                .await
                .map_err(api)?;
            println!(
                "{}",
                json!({
                    "collection": stead_http::views::CollectionView::from(&row),
                    "seconds": started.elapsed().as_secs_f64(),
                })
            );
        }
        KnowledgeCommand::Query(args) => {
            let body = json!({ "text": args.text, "top_k": args.top_k, "mode": args.mode });
            let query = knowledge.parse_query(&body).map_err(api)?;
            let hits = knowledge
                .query(&key(&args.collection), query, &Default::default())
                .await
                .map_err(api)?;
            for (rank, hit) in hits.iter().enumerate() {
                println!(
                    "{}",
                    json!({ "rank": rank + 1, "document_id": hit.document_id,
                            "chunk_index": hit.chunk_index, "score": hit.score,
                            "chunk": hit.chunk })
                );
            }
        }
        KnowledgeCommand::List => {
            for row in knowledge
                .store()
                .list_collections(DEFAULT_PROJECT)
                .await
                .map_err(stead_agents::knowledge::store_error)
                .map_err(api)?
            {
                println!("{}", json!(stead_http::views::CollectionView::from(&row)));
            }
        }
    }
    store.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// Adds files one by one, with a progress line per file on stderr and a summary on stdout.
async fn add(knowledge: &Knowledge, args: AddArgs) -> anyhow::Result<()> {
    knowledge
        .create_collection(&key(&args.collection), args.route.as_deref())
        .await
        .map_err(api)?;
    let started = Instant::now();
    let total = args.files.len();
    let (mut created, mut replaced, mut unchanged, mut chunks) = (0, 0, 0, 0);
    for (n, path) in args.files.iter().enumerate() {
        let text = files::read_document(path)?;
        let id = path.display().to_string();
        let outcome = knowledge
            .put_document(
                &key(&args.collection),
                &id,
                &text,
                Some(json!({ "path": id })),
                None,
            )
            .await
            .map_err(|e| anyhow::anyhow!("{id}: {}", api(e)))?;
        let document = outcome.document();
        chunks += document.chunks;
        let what = match outcome {
            stead_persistence::PutOutcome::Created(_) => {
                created += 1;
                "added"
            }
            stead_persistence::PutOutcome::Replaced(_) => {
                replaced += 1;
                "replaced"
            }
            stead_persistence::PutOutcome::Unchanged(_) => {
                unchanged += 1;
                "unchanged"
            }
        };
        eprintln!(
            "[{}/{total}] {what} {id} ({} chunks, {:.1}s)",
            n + 1,
            document.chunks,
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "{}",
        json!({
            "collection": args.collection,
            "files": total,
            "created": created,
            "replaced": replaced,
            "unchanged": unchanged,
            "chunks": chunks,
            "seconds": started.elapsed().as_secs_f64(),
        })
    );
    Ok(())
}
