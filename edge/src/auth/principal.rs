//! The caller of a request, once authenticated, and what it may reach: operators everything,
//! a session token its session (and the sessions below it), a project's key its project.

use stead_model::Decider;
use stead_persistence::{Scope, DEFAULT_PROJECT};
use uuid::Uuid;

use super::oidc::User;
use super::ProjectKey;
use crate::{ApiError, ErrorCode};

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// No credentials, and none are required (loopback without API keys).
    Local,
    /// An API key, named by the first 8 hex digits of its digest.
    ApiKey(String),
    /// A session token: this session only.
    Session(Uuid),
    /// A project's virtual key: that project's resources, as far as its role allows.
    ProjectKey(ProjectKey),
    /// A person signed in with the identity provider (`[server.oidc]`): an installation admin,
    /// or a project's resources as far as the role it maps to allows.
    User(User),
}

impl Principal {
    /// May use endpoints that span sessions (create, list, approvals inbox, agents).
    pub fn is_operator(&self) -> bool {
        !matches!(self, Principal::Session(_))
    }

    pub(crate) fn may_access(&self, session: Uuid) -> bool {
        match self {
            Principal::Session(id) => *id == session,
            _ => true,
        }
    }

    /// Whose rows the caller sees: a project key its project's, anyone else the installation's
    /// (a session token reaches only its own session tree, checked per request).
    pub fn scope(&self) -> Scope {
        match self {
            Principal::ProjectKey(key) => Scope::Project(key.project),
            Principal::User(User {
                project: Some(project),
                ..
            }) => Scope::Project(*project),
            _ => Scope::Installation,
        }
    }

    /// The project the caller is confined to (`None`: the installation's, or a session
    /// token's own session).
    pub fn confined_to(&self) -> Option<Uuid> {
        match self.scope() {
            Scope::Project(project) => Some(project),
            Scope::Installation => None,
        }
    }

    /// The project what this caller creates belongs to.
    pub fn project(&self) -> Uuid {
        self.confined_to().unwrap_or(DEFAULT_PROJECT)
    }

    /// Whether the caller may call the route (a key may be limited to some, and a project to
    /// some: docs/tenancy.md).
    pub fn may_use_route(&self, route: &str) -> bool {
        match self {
            Principal::ProjectKey(ProjectKey {
                routes: Some(routes),
                ..
            })
            | Principal::User(User {
                routes: Some(routes),
                ..
            }) => routes.iter().any(|r| r == route),
            _ => true,
        }
    }

    /// Whether the caller may start sessions of the agent (a project may be limited to some).
    pub fn may_use_agent(&self, agent: &str) -> bool {
        match self {
            Principal::ProjectKey(ProjectKey {
                agents: Some(agents),
                ..
            })
            | Principal::User(User {
                agents: Some(agents),
                ..
            }) => agents.iter().any(|a| a == agent),
            _ => true,
        }
    }

    /// For what spans projects (the cluster, projects themselves, and what projects do not own
    /// yet): the config file's keys and loopback callers.
    pub fn require_installation(&self) -> Result<(), ApiError> {
        match self {
            Principal::Local | Principal::ApiKey(_) => Ok(()),
            Principal::User(user) if user.project.is_none() => Ok(()),
            Principal::ProjectKey(_) | Principal::Session(_) | Principal::User(_) => {
                Err(ApiError::new(
                    ErrorCode::Forbidden,
                    "only the installation's keys (the configuration's `server.api_keys`) may \
                 call this endpoint",
                ))
            }
        }
    }

    /// The name the model router's per-key limits and budgets know this caller by: the key's
    /// fingerprint, or `local`. A session token has none (its session's calls are charged to
    /// whoever created the session).
    pub fn limits_key(&self) -> Option<String> {
        match self {
            Principal::Local => Some(stead_actors::LOCAL_PRINCIPAL.into()),
            Principal::ApiKey(name) => Some(name.clone()),
            Principal::ProjectKey(key) => Some(format!("key:{}", key.id)),
            // A project's people spend from their project's budget (`user:{project}:{name}`);
            // the installation's admins are the default project's.
            Principal::User(user) => Some(format!(
                "user:{}:{}",
                user.project.unwrap_or(DEFAULT_PROJECT),
                user.name
            )),
            Principal::Session(_) => None,
        }
    }

    /// Whether the caller may allow a session to spend past a budget (decide a budget
    /// approval): the installation's keys and loopback callers, and a project's `admin` keys.
    /// A member or a session token would be granting itself money.
    pub fn may_spend(&self) -> bool {
        match self {
            Principal::Local | Principal::ApiKey(_) => true,
            Principal::ProjectKey(key) => key.role == stead_persistence::tenancy::KeyRole::Admin,
            Principal::User(user) => user.role == stead_persistence::tenancy::KeyRole::Admin,
            Principal::Session(_) => false,
        }
    }

    /// Who decided, as journaled in `approval_decided`.
    pub fn name(&self) -> Decider {
        match self {
            Principal::Local => Decider::Local,
            Principal::ApiKey(fingerprint) => Decider::ApiKey(fingerprint.clone()),
            Principal::Session(id) => Decider::SessionToken(*id),
            Principal::ProjectKey(key) => Decider::ProjectKey(key.id),
            Principal::User(user) => Decider::User(user.name.clone()),
        }
    }

    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.is_operator() {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                "a session token only grants access to its own session",
            ))
        }
    }

    /// The session itself (not its children): a session token only its own session, a
    /// project key only its project's sessions (another project's answers 404 exactly as a
    /// missing one).
    pub async fn require_session(
        &self,
        store: &dyn stead_persistence::JournalStore,
        session: Uuid,
    ) -> Result<(), ApiError> {
        if let Some(project) = self.confined_to() {
            return in_project(store, session, project).await;
        }
        self.require_exact(session)
    }

    fn require_exact(&self, session: Uuid) -> Result<(), ApiError> {
        if self.may_access(session) {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                "this session token belongs to another session",
            ))
        }
    }
}

/// How many parent links a session token's reach follows (more than any sensible
/// `sessions.max_delegation_depth`).
const MAX_REACH: usize = 16;

impl Principal {
    /// Like [`Principal::require_session`], and a session token also reaches the descendants
    /// of its session: the child sessions its `agent` calls started, their children, and so on
    /// (reading them and deciding their approvals; docs/security.md). A session that does not
    /// exist is not found for operators and forbidden for a token.
    pub async fn require_session_tree(
        &self,
        store: &dyn stead_persistence::JournalStore,
        session: Uuid,
    ) -> Result<(), ApiError> {
        if let Some(project) = self.confined_to() {
            return in_project(store, session, project).await;
        }
        let Principal::Session(own) = self else {
            return Ok(());
        };
        let mut at = session;
        for _ in 0..=MAX_REACH {
            if at == *own {
                return Ok(());
            }
            match store.get_session(at).await {
                Ok(row) => match row.parent {
                    Some(parent) => at = parent.session_id,
                    None => break,
                },
                Err(stead_persistence::Error::SessionNotFound(_)) => break,
                Err(error) => return Err(error.into()),
            }
        }
        self.require_exact(session)
    }
}

/// Found, and of `project`; else the 404 of a missing session.
async fn in_project(
    store: &dyn stead_persistence::JournalStore,
    session: Uuid,
    project: Uuid,
) -> Result<(), ApiError> {
    match store.get_session(session).await {
        Ok(row) if row.project_id == project => Ok(()),
        Ok(_) => Err(ApiError::session_not_found()),
        Err(error) => Err(error.into()),
    }
}
