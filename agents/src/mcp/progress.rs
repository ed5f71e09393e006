//! The MCP client's protocol handler: `notifications/progress` routed to the calling
//! session's [`ProgressSink`] by progress token (a report that overtakes its call's
//! registration is kept until the call registers), and `notifications/tools/list_changed` as a
//! wake-up for the server's supervisor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as SyncMutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use stead_actors::tools::{ProgressSink, ToolProgress};

/// State the protocol handler shares with the server: where progress goes, and a wake-up for
/// a changed tool list.
#[derive(Default)]
pub(super) struct Shared {
    sinks: SyncMutex<HashMap<ProgressToken, ProgressSink>>,
    /// Progress that arrived before its call registered its token (the handler runs each
    /// notification in a task of its own, so it can overtake the request's return).
    early: SyncMutex<Vec<(ProgressToken, ToolProgress)>>,
    pub(super) list_changed: tokio::sync::Notify,
}

/// Early progress kept per server at most.
const EARLY_PROGRESS: usize = 64;

/// The protocol handler: routes `notifications/progress` and `tools/list_changed`.
pub(super) struct Handler {
    pub(super) shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let progress = ToolProgress {
            progress: Some(params.progress),
            total: params.total,
            message: params.message,
            ..Default::default()
        };
        let sink = lock(&self.shared.sinks)
            .get(&params.progress_token)
            .cloned();
        match sink {
            Some(sink) => sink.report(progress),
            None => {
                let mut early = lock(&self.shared.early);
                if early.len() >= EARLY_PROGRESS {
                    early.remove(0);
                }
                early.push((params.progress_token, progress));
            }
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.list_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("stead", env!("CARGO_PKG_VERSION")),
        )
    }
}

pub(super) fn lock<T>(mutex: &SyncMutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A call's progress route, removed when the call ends.
pub(super) struct ProgressRoute {
    shared: Arc<Shared>,
    token: ProgressToken,
}

impl ProgressRoute {
    pub(super) fn new(shared: &Arc<Shared>, token: ProgressToken, sink: ProgressSink) -> Self {
        let early: Vec<ToolProgress> = {
            let mut early = lock(&shared.early);
            let (mine, others) = early.drain(..).partition(|(t, _)| *t == token);
            *early = others;
            mine.into_iter().map(|(_, p)| p).collect()
        };
        for progress in early {
            sink.report(progress);
        }
        lock(&shared.sinks).insert(token.clone(), sink);
        ProgressRoute {
            shared: shared.clone(),
            token,
        }
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        lock(&self.shared.sinks).remove(&self.token);
    }
}
