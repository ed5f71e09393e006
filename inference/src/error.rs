/// Everything a generation request can fail with. Callers match on these: the gateway maps
/// them to HTTP statuses, the session actor to `model_call_failed`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The pool's queue is full; try again later. Answered at once, nothing was queued.
    #[error("the inference pool is overloaded ({queued} requests queued); retry later")]
    Overloaded { queued: usize },

    /// The request can never succeed as written (empty messages, bad sampling values, …).
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// The request names a model this engine does not serve.
    #[error("unknown model `{0}`")]
    UnknownModel(String),

    /// A tool's parameter schema cannot be compiled into a grammar.
    #[error("invalid schema for tool `{tool}`: {message}")]
    InvalidToolSchema { tool: String, message: String },

    /// Prompt plus `max_tokens` does not fit the model's context window.
    #[error("the prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) exceeds the context window of {context} tokens")]
    ContextOverflow {
        prompt_tokens: usize,
        max_tokens: usize,
        context: usize,
    },

    /// The model directory is missing files or holds something unusable.
    #[error("model directory {dir}: {message}")]
    ModelDir { dir: String, message: String },

    /// ONNX Runtime could not be loaded or initialised.
    #[error("ONNX Runtime: {0}")]
    Runtime(String),

    /// The requested execution provider cannot be used.
    #[error("execution provider: {0}")]
    ExecutionProvider(String),

    /// Running the model failed.
    #[error("inference failed: {0}")]
    Inference(String),

    /// The pool has shut down.
    #[error("the inference pool is shut down")]
    ShutDown,
}

impl From<ort::Error> for Error {
    fn from(error: ort::Error) -> Self {
        Error::Inference(error.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
