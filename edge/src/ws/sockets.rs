//! The per-session cap on open WebSockets (`server.max_websockets_per_session`).

use uuid::Uuid;

#[derive(Default)]
pub struct SessionSockets(std::sync::Mutex<std::collections::HashMap<Uuid, usize>>);

/// One session's WebSocket slot; released on drop.
pub struct SessionSocket {
    sockets: std::sync::Arc<SessionSockets>,
    id: Uuid,
}

impl SessionSockets {
    /// A slot for one more WebSocket of `id`, unless it holds `max` already.
    pub(crate) fn take(self: &std::sync::Arc<Self>, id: Uuid, max: usize) -> Option<SessionSocket> {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(id).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(SessionSocket {
            sockets: self.clone(),
            id,
        })
    }

    /// WebSockets `id` holds now.
    pub fn count(&self, id: Uuid) -> usize {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&id).copied().unwrap_or(0)
    }
}

impl Drop for SessionSocket {
    fn drop(&mut self) {
        let mut counts = self.sockets.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.id);
            }
        }
    }
}
