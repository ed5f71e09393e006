//! The arguments of `stead bench …` and `stead eval …` (clap), parsed by the binary's command line.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Forty fixed prompts to the demo agent: how often the right tool is called when one is
    /// asked for, and how often a tool is called unasked.
    Tools(EvalToolsArgs),
    /// Whole turns and conversations of the demo agent, graded on what a person sees: the
    /// tools called, the reply, no tool-call text, no empty reply, the turn's time.
    Agent(EvalAgentArgs),
}

#[derive(Debug, Clone, Args)]
pub struct EvalAgentArgs {
    /// Run only the first N cases (a quick check).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Print the result (with every turn's outcome) as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when the share of passing cases is below this (0–1).
    #[arg(long, value_name = "RATE")]
    pub fail_under: Option<f64>,
    /// Cases from this dataset file (JSONL, docs/evals.md) instead of the shipped ones
    /// (evals/datasets/demo-agent.jsonl).
    #[arg(long, value_name = "FILE")]
    pub cases: Option<PathBuf>,
    /// A prepared model (its directory under {data_dir}/models) instead of the default.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Cases run at once (the local engine batches their model calls).
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
}

#[derive(Debug, Clone, Args)]
pub struct EvalToolsArgs {
    /// Use only the first N prompts of each half (a quick check).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Print the result (with every prompt's outcome) as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Append throughput and latency of the durable journal.
    Journal(JournalBenchArgs),
    /// The local inference engine against onnxruntime-genai on the same model.
    Inference(InferenceBenchArgs),
    /// Decode speed, single stream and N streams, against onnxruntime-genai in alternating
    /// rounds (the figures of the performance targets).
    Decode(DecodeBenchArgs),
    /// Session actors: parked-session memory, activation time, durable step latency.
    Sessions(SessionsBenchArgs),
    /// WebSocket clients on one server: memory, broadcast latency, reconnect-to-replay.
    Ws(WsBenchArgs),
    /// The model router's added latency under open-loop load, against LiteLLM's proxy.
    Gateway(GatewayBenchArgs),
    /// `stead replay check --all` over many recorded sessions.
    Replay(ReplayBenchArgs),
    /// SIGKILLs of `stead serve` under a mixed workload, each restart checked for loss,
    /// duplicates and sessions that do not resume.
    Chaos(ChaosBenchArgs),
    /// Many schedules over many sessions: firing lag at offered rates, memory, idle CPU.
    Schedules(SchedulesBenchArgs),
    /// Two nodes on one PostgreSQL: what forwarding costs, and the takeover of a dead node's
    /// running turn (needs DATABASE_URL=postgres://…).
    Cluster(ClusterBenchArgs),
    /// Embedding throughput of the local embedding model, against Python onnxruntime.
    Knowledge(KnowledgeBenchArgs),
    /// One long session on a small prompt budget (an upstream double): no failed turn, no
    /// prompt over the budget, the summariser's share of calls, a fact kept in memory.
    Context(ContextBenchArgs),
    /// The evaluation engine: a dataset of recorded sessions (a model double) run one case at
    /// a time and `--concurrency` at a time; cases per second of each (docs/evals.md).
    Eval(EvalBenchArgs),
    /// Projects' virtual keys: authentication through the cache beside a configuration key,
    /// a cache miss, a key's budgets and the ledger, listing — at 1/100 of the scale and full.
    Tenancy(TenancyBenchArgs),
    /// Guardrails: the `pii` check and redaction on a 2 KB message, and a streamed answer
    /// through the hold-back, against the 1 ms p99 target.
    Guardrails(GuardrailsBenchArgs),
    /// Guardrails' detection quality: the `pii` and `injection` checks against labelled data
    /// from registry packages, beside Microsoft Presidio and vard on the same texts.
    GuardrailQuality(GuardrailQualityBenchArgs),
    /// The artifact store through `stead serve`: upload and download MB/s and the p99 of a
    /// 1 MiB GET, on the filesystem and on an S3-compatible server (moto's), each beside the
    /// same bytes written and read through the store directly.
    Artifacts(ArtifactsBenchArgs),
    /// Speech to text: the local Whisper tiny.en beside whisper.cpp on the same weights and
    /// samples (five labelled LibriVox sentences): real-time factor and word error rate.
    Speech(SpeechBenchArgs),
}

#[derive(Debug, Clone, Args)]
pub struct SpeechBenchArgs {
    /// Transcriptions of each clip; the best time counts.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Threads for both engines (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Stead alone (no whisper.cpp).
    #[arg(long)]
    pub no_peer: bool,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ArtifactsBenchArgs {
    /// Artifacts uploaded and downloaded per store (each of --object-kib, distinct bytes).
    #[arg(long, default_value_t = 64)]
    pub objects: usize,
    /// The size of each, in KiB.
    #[arg(long, default_value_t = 1024)]
    pub object_kib: usize,
    /// moto's `moto_server` for the S3 store (default: $MOTO_SERVER; without either, the S3
    /// store is skipped).
    #[arg(long)]
    pub moto: Option<std::path::PathBuf>,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct GuardrailQualityBenchArgs {
    /// Labelled PII texts to generate.
    #[arg(long, default_value_t = 300)]
    pub samples: usize,
    /// The generator's seed (the same seed, the same texts).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Where `scripts/guardrail-peers.sh` prepared the peers (default:
    /// {data_dir}/setup/guardrail-peers).
    #[arg(long)]
    pub peers: Option<std::path::PathBuf>,
    /// Also ask the local model (`--model`) the injection rubric about this many of the
    /// injection texts, spread evenly — the `injection` guardrail's `route` option — and score
    /// the patterns, the model and both together on them (0: not asked).
    #[arg(long, default_value_t = 0)]
    pub model_texts: usize,
    /// The prepared model asked (a directory name under {data_dir}/models).
    #[arg(long, default_value = stead_inference::setup::DEFAULT_MODEL)]
    pub model: String,
    /// Also show (on stderr) up to this many injections Stead missed and benign texts it
    /// flagged, to see where the patterns fall short.
    #[arg(long, default_value_t = 0)]
    pub misses: usize,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct GuardrailsBenchArgs {
    /// Timed runs per figure (a tenth of them for the streamed answer).
    #[arg(long, default_value_t = 20_000)]
    pub samples: usize,
    /// The message's size.
    #[arg(long, default_value_t = 2048)]
    pub bytes: usize,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct TenancyBenchArgs {
    /// Keys in all, spread evenly over the projects.
    #[arg(long, default_value_t = 10_000)]
    pub keys: usize,
    #[arg(long, default_value_t = 1_000)]
    pub projects: usize,
    /// Timed operations per figure (a cache miss and the ledger: at most 2,000).
    #[arg(long, default_value_t = 20_000)]
    pub samples: usize,
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: BenchBackend,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct EvalBenchArgs {
    /// Cases in the dataset (each a recorded session).
    #[arg(long, default_value_t = 100)]
    pub cases: usize,
    /// The model double's time per call.
    #[arg(long, default_value_t = 25)]
    pub model_ms: u64,
    /// Cases at a time in the second run.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: BenchBackend,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ContextBenchArgs {
    /// Turns of the session (the first keeps a fact, the last asks for it).
    #[arg(long, default_value_t = 500)]
    pub turns: usize,
    /// The agent's `max_prompt_tokens`.
    #[arg(long, default_value_t = 4096)]
    pub budget: u64,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `stead bench knowledge` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KnowledgePart {
    /// Embedding throughput against Python onnxruntime on the same model.
    Embed,
    /// Query latency over --index-chunks synthetic chunks on --backend.
    Query,
    /// Recall@5 and MRR of exact, ANN and hybrid search on the repository's docs.
    Eval,
}

#[derive(Debug, Clone, Args)]
pub struct KnowledgeBenchArgs {
    #[arg(long, value_enum, default_value = "embed")]
    pub part: KnowledgePart,
    /// Chunks to embed.
    #[arg(long, default_value_t = 2_000)]
    pub chunks: usize,
    /// Words per chunk (synthetic, deterministic).
    #[arg(long, default_value_t = 80)]
    pub words: usize,
    /// Chunks per model run.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Skip the Python onnxruntime run.
    #[arg(long)]
    pub no_peer: bool,
    /// query: chunks in the collection (1,000 documents).
    #[arg(long, default_value_t = 100_000)]
    pub index_chunks: usize,
    /// query: vector queries per measurement.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    /// query: the database.
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: BenchBackend,
    /// query: the synthetic embeddings: `structured` (chunks of a document near its topic, in
    /// a 24-dimension subspace, as sentence embeddings are) or `uniform` (no structure: the
    /// worst case for a graph).
    #[arg(long, value_enum, default_value = "structured")]
    pub vectors: SyntheticVectors,
    /// eval: the Markdown files to search.
    #[arg(long, default_value = "docs")]
    pub docs: std::path::PathBuf,
    /// eval: the labelled questions.
    #[arg(long, default_value = "tests/fixtures/knowledge-eval/queries.jsonl")]
    pub eval_queries: std::path::PathBuf,
    /// Print the results as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyntheticVectors {
    Structured,
    Uniform,
}

#[derive(Debug, Clone, Args)]
pub struct ClusterBenchArgs {
    /// Requests per measurement (latency: one at a time; throughput: --concurrency at once).
    #[arg(long, default_value_t = 2_000)]
    pub requests: usize,
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// SIGKILLs of the node running a turn, each timed until another node finished it.
    #[arg(long, default_value_t = 5)]
    pub takeovers: usize,
    #[arg(long, default_value_t = 3)]
    pub lease_ttl_secs: u64,
    #[arg(long, default_value_t = 1)]
    pub sweep_secs: u64,
    /// Print the results as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SchedulesBenchArgs {
    /// Pending schedules (`every_secs`, due times spread evenly over the period).
    #[arg(long, default_value_t = 100_000)]
    pub schedules: usize,
    /// Sessions they belong to.
    #[arg(long, default_value_t = 10_000)]
    pub sessions: usize,
    /// Offered firing rates (per second), comma-separated; each runs on a fresh database.
    #[arg(long, value_delimiter = ',', default_value = "100,500,1000")]
    pub rates: Vec<f64>,
    /// Measured seconds of firing per rate.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// Seconds with every schedule pending and none due, for the scheduler's idle CPU.
    #[arg(long, default_value_t = 10)]
    pub idle: u64,
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: BenchBackend,
    /// Print the results as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ChaosBenchArgs {
    /// Faults in this run (SIGKILLs, or disk-full episodes with --fault disk-full).
    #[arg(long, default_value_t = 1_000)]
    pub kills: usize,
    /// What goes wrong: `kill` (SIGKILL and restart); `disk-full` (the data directory's
    /// filesystem fills up for a while, then space returns; SQLite only — put --data-dir on a
    /// small filesystem of its own, e.g. `mount -t tmpfs -o size=64m tmpfs DIR`); `db-restart`
    /// (PostgreSQL is restarted by --db-restart-command); `none` (a soak: windows of
    /// --min-up-ms..--max-up-ms with the server's memory, open files and request latency).
    #[arg(long, value_enum, default_value = "kill")]
    pub fault: ChaosFault,
    /// With --fault db-restart: a shell command that restarts the database and returns once it
    /// is back, e.g. `pg_ctl -D DATA -m immediate -w restart`.
    #[arg(long)]
    pub db_restart_command: Option<String>,
    /// Which database (PostgreSQL: --database-url / DATABASE_URL, in a scratch database
    /// dropped afterwards).
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: BenchBackend,
    /// Concurrent clients of the workload.
    #[arg(long, default_value_t = 6)]
    pub clients: usize,
    /// Nodes: more than one runs a cluster on one PostgreSQL (docs/cluster.md; needs
    /// --backend postgres): clients pick a node per request, each kill hits the node holding
    /// the most sessions.
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// The server runs between this and --max-up-ms (uniformly at random) before each kill.
    #[arg(long, default_value_t = 200)]
    pub min_up_ms: u64,
    #[arg(long, default_value_t = 2_000)]
    pub max_up_ms: u64,
    /// A JSON file the tallies are added to, so that many runs add up (created when missing).
    #[arg(long)]
    pub tally: Option<std::path::PathBuf>,
    /// Seed of the random moments and actions (default: from the clock; printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// With --fault none (one node): the server has an API key, and attackers without it and
    /// with a session token run beside the workload (docs/benchmarks.md, "Abuse"); each
    /// window checks that the limits held.
    #[arg(long)]
    pub abuse: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ReplayBenchArgs {
    /// Recorded sessions to generate.
    #[arg(long, default_value_t = 1_000)]
    pub sessions: usize,
    /// Events per session (approximately: whole turns of the demo agent).
    #[arg(long, default_value_t = 50)]
    pub events: usize,
    /// Timed runs of the check.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Which database to record into (PostgreSQL: --database-url / DATABASE_URL, in a scratch
    /// database dropped afterwards).
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: BenchBackend,
}

#[derive(Debug, Clone, Args)]
pub struct GatewayBenchArgs {
    /// Arrival rates to run, requests per second, comma-separated.
    #[arg(long, default_value = "50,2000")]
    pub rates: String,
    /// Measured seconds per rate and target.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Warm-up seconds per rate and target (not measured).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// The upstream double's fixed latency.
    #[arg(long, default_value_t = 20)]
    pub upstream_ms: u64,
    /// LiteLLM's `litellm` executable (default: target/litellm-venv/bin/litellm when present).
    #[arg(long)]
    pub litellm: Option<std::path::PathBuf>,
    /// Highest rate LiteLLM is loaded at (one worker saturates near 60 req/s on 2 cores).
    #[arg(long, default_value_t = 200.0)]
    pub litellm_max_rate: f64,
    /// Portkey's AI Gateway, its `build/start-server.js` (default:
    /// target/portkey-gateway/node_modules/@portkey-ai/gateway/build/start-server.js when
    /// present; `npm install --prefix target/portkey-gateway @portkey-ai/gateway`). Run by
    /// `node` (or `$NODE`).
    #[arg(long)]
    pub portkey: Option<std::path::PathBuf>,
    /// Highest rate Portkey's gateway is loaded at.
    #[arg(long, default_value_t = 5000.0)]
    pub portkey_max_rate: f64,
    /// Do not run the peers (LiteLLM, Portkey).
    #[arg(long)]
    pub no_peer: bool,
}

#[derive(Debug, Clone, Args)]
pub struct WsBenchArgs {
    /// WebSocket clients attached at once.
    #[arg(long, default_value_t = 10_000)]
    pub clients: usize,
    /// Sessions the clients are spread over.
    #[arg(long, default_value_t = 100)]
    pub sessions: usize,
    /// Messages per session (each turn's events reach every client of the session).
    #[arg(long, default_value_t = 3)]
    pub turns: usize,
    /// Reconnects timed while the others stay attached.
    #[arg(long, default_value_t = 1_000)]
    pub reconnects: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SessionsBenchArgs {
    /// Parked sessions: measured as the product keeps them (passivated), then held live all at
    /// once. (At 100,000 the lease releases of a mass passivation queue on SQLite's writer for
    /// many minutes: docs/benchmarks.md.)
    #[arg(long, default_value_t = 20_000)]
    pub parked: usize,
    /// Events in the long session whose activation is timed.
    #[arg(long, default_value_t = 10_000)]
    pub long_events: usize,
    /// Turns for the durable step latency.
    #[arg(long, default_value_t = 2_000)]
    pub turns: usize,
    /// Session lengths (events) at which whole turns and one decision are timed
    /// (`--step-cost-only`); the first and last are compared against the flat target.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000")]
    pub step_lengths: Vec<usize>,
    /// Run only the step-cost section (whole turns at each of `--step-lengths`, `--turns` of
    /// them after 20 untimed).
    #[arg(long)]
    pub step_cost_only: bool,
    /// Step cost on histories that never compacted (every request carries the whole
    /// transcript) instead of ones compacted as a prompt budget would.
    #[arg(long)]
    pub no_compaction: bool,
}

#[derive(Debug, Clone, Args)]
pub struct InferenceBenchArgs {
    /// The prepared model to measure (a directory name under {data_dir}/models).
    #[arg(long, default_value = stead_inference::setup::DEFAULT_MODEL)]
    pub model: String,
    /// Sequential runs for TTFT and single-stream figures.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// New tokens per generation.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Skip the peer (onnxruntime-genai).
    #[arg(long)]
    pub no_peer: bool,
    /// Where the engine runs: cpu, cuda or auto.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda", "auto"])]
    pub execution_provider: String,
    /// ONNX Runtime library (default: the one `stead setup` prepared).
    #[arg(long, value_name = "FILE")]
    pub runtime_library: Option<PathBuf>,
    /// Steps of the agent turn whose time to first token is measured with and without the
    /// prefix cache (the demo agent's prompt and tools, history growing every step); 0 skips it.
    #[arg(long, default_value_t = 10)]
    pub agent_steps: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DecodeBenchArgs {
    /// The prepared model to measure (a directory name under {data_dir}/models).
    #[arg(long, default_value = stead_inference::setup::DEFAULT_MODEL)]
    pub model: String,
    /// Rounds; each runs both sides, the first side alternating.
    #[arg(long, default_value_t = 6)]
    pub rounds: usize,
    /// Runs per side per round, of each figure (single stream, N streams).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// New tokens per generation.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Concurrent streams for the aggregate figure.
    #[arg(long, default_value_t = 8)]
    pub streams: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChaosFault {
    Kill,
    DiskFull,
    /// The database is restarted by --db-restart-command while the workload runs.
    DbRestart,
    /// Nothing goes wrong: a soak; each "fault" is a window whose memory, open files and
    /// latency are printed.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, Args)]
pub struct JournalBenchArgs {
    /// Which database to measure. PostgreSQL uses --database-url / DATABASE_URL and works in a
    /// scratch database that it drops afterwards.
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: BenchBackend,
    /// Sessions appending concurrently.
    #[arg(long, default_value_t = 100)]
    pub sessions: usize,
    /// Appends per session (one event each).
    #[arg(long, default_value_t = 200)]
    pub events: usize,
    /// Bytes of text in each event's payload.
    #[arg(long, default_value_t = 200)]
    pub payload_bytes: usize,
    /// Skip the raw baseline (the same rows written straight into the engine).
    #[arg(long)]
    pub no_baseline: bool,
    /// PostgreSQL: the journal committer's writers (connections). With more than one the raw
    /// baseline is also run on that many connections at once.
    #[arg(long, default_value_t = stead_persistence::DEFAULT_JOURNAL_WRITERS)]
    pub journal_writers: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}
