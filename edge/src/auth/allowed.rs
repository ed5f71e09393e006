//! What a project allows of the installation's agents and routes (docs/tenancy.md, "Agents and
//! routes"): lists in its settings, applied to its keys and people as a request is
//! authenticated, so every later check (`Principal::may_use_route`, `may_use_agent`) is the
//! same for a key's own list and its project's.

use super::{Principal, VirtualKeys};
use crate::ApiError;

impl VirtualKeys {
    /// `principal` with its project's lists applied: a key's routes narrowed to those its
    /// project allows too, and the project's agents. Read through the node's project cache
    /// (5 s), so a narrowed list holds on every node within seconds.
    pub async fn narrowed(&self, principal: Principal) -> Result<Principal, ApiError> {
        let project = match &principal {
            Principal::ProjectKey(key) => key.project,
            Principal::User(user) => match user.project {
                Some(project) => project,
                None => return Ok(principal),
            },
            _ => return Ok(principal),
        };
        let row = self
            .project(project)
            .await
            .map_err(|e| ApiError::internal("reading the caller's project failed", e))?;
        Ok(match principal {
            Principal::ProjectKey(mut key) => {
                key.routes = intersect(key.routes.take(), row.allowed_routes());
                key.agents = row.allowed_agents();
                Principal::ProjectKey(key)
            }
            Principal::User(mut user) => {
                user.routes = row.allowed_routes();
                user.agents = row.allowed_agents();
                Principal::User(user)
            }
            other => other,
        })
    }
}

/// The routes both lists allow, in the key's order (`None`: no limit).
fn intersect(key: Option<Vec<String>>, project: Option<Vec<String>>) -> Option<Vec<String>> {
    match (key, project) {
        (None, project) => project,
        (key, None) => key,
        (Some(key), Some(project)) => {
            Some(key.into_iter().filter(|r| project.contains(r)).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::intersect;

    fn list(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn a_key_keeps_only_what_its_project_allows() {
        assert_eq!(intersect(None, None), None);
        assert_eq!(intersect(list(&["a", "b"]), None), list(&["a", "b"]));
        assert_eq!(intersect(None, list(&["b"])), list(&["b"]));
        assert_eq!(
            intersect(list(&["a", "b", "c"]), list(&["c", "a"])),
            list(&["a", "c"])
        );
        assert_eq!(intersect(list(&["a"]), list(&["b"])), list(&[]));
    }
}
