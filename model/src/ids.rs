//! Identifiers that would otherwise be bare strings and integers: a tool call's id, a lease's
//! fencing epoch, and who decided an approval. Each serializes exactly as the bare value it
//! wraps (journals and wire formats are unchanged); the types keep a seq (a journal position,
//! a plain `i64` for its arithmetic and SQL binds) from being passed where an epoch is meant,
//! and a decider from being told apart by a string prefix.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// The id of one tool call within a session (the model's, or one Stead assigned).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(String);

impl CallId {
    pub fn new(id: impl Into<String>) -> Self {
        CallId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::ops::Deref for CallId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for CallId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for CallId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for CallId {
    fn from(id: String) -> Self {
        CallId(id)
    }
}

impl From<&str> for CallId {
    fn from(id: &str) -> Self {
        CallId(id.to_owned())
    }
}

impl From<CallId> for String {
    fn from(id: CallId) -> Self {
        id.0
    }
}

impl PartialEq<str> for CallId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CallId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for CallId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl ts_rs::TS for CallId {
    type WithoutGenerics = Self;
    type OptionInnerType = Self;
    fn name(_: &ts_rs::Config) -> String {
        "string".into()
    }
    fn inline(_: &ts_rs::Config) -> String {
        "string".into()
    }
}

/// A lease's fencing epoch: every acquisition of a session's lease takes a higher one, and a
/// journal write carrying an older epoch is refused.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epoch(pub i64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Who decided an approval, as `approval_decided` journals it (`decided_by`). Serialized as
/// the string it always was: `stead` (an approval that expired), `local` (a caller of a
/// loopback server without keys), `api_key:{fingerprint}`, `project_key:{key id}` (a project's
/// virtual key), `session_token:{session id}`, `user:{name}` (a person signed in with the
/// identity provider), or any other name (tests, imported journals).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Decider {
    /// Stead itself: nobody decided in time.
    System,
    /// A caller of a server without API keys (loopback only).
    Local,
    /// An operator, by the fingerprint of their API key.
    ApiKey(String),
    /// The holder of a session's token.
    SessionToken(Uuid),
    /// A project's virtual key, by its id.
    ProjectKey(Uuid),
    /// A person signed in with the identity provider, by the name its token gives
    /// (`[server.oidc] name_claim`).
    User(String),
    /// Any other name.
    Named(String),
}

impl Decider {
    const SYSTEM: &'static str = "stead";
    const LOCAL: &'static str = "local";
    const API_KEY: &'static str = "api_key:";
    const SESSION_TOKEN: &'static str = "session_token:";
    const PROJECT_KEY: &'static str = "project_key:";
    const USER: &'static str = "user:";

    /// Reads a journaled `decided_by`. A `session_token:` prefix is a session token's holder
    /// whatever follows it, so that no spelling of it passes for an operator.
    pub fn parse(name: &str) -> Self {
        if name == Self::SYSTEM {
            Decider::System
        } else if name == Self::LOCAL {
            Decider::Local
        } else if let Some(fingerprint) = name.strip_prefix(Self::API_KEY) {
            Decider::ApiKey(fingerprint.to_owned())
        } else if let Some(id) = name.strip_prefix(Self::SESSION_TOKEN) {
            Decider::SessionToken(Uuid::parse_str(id).unwrap_or(Uuid::nil()))
        } else if let Some(id) = name
            .strip_prefix(Self::PROJECT_KEY)
            .and_then(|id| Uuid::parse_str(id).ok())
        {
            Decider::ProjectKey(id)
        } else if let Some(user) = name.strip_prefix(Self::USER) {
            Decider::User(user.to_owned())
        } else {
            Decider::Named(name.to_owned())
        }
    }

    /// Whether this is a session token's holder (who may reject but not approve an
    /// operator-only tool's call).
    pub fn is_session_token(&self) -> bool {
        matches!(self, Decider::SessionToken(_))
    }
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decider::System => f.write_str(Self::SYSTEM),
            Decider::Local => f.write_str(Self::LOCAL),
            Decider::ApiKey(fingerprint) => write!(f, "{}{fingerprint}", Self::API_KEY),
            Decider::SessionToken(id) => write!(f, "{}{id}", Self::SESSION_TOKEN),
            Decider::ProjectKey(id) => write!(f, "{}{id}", Self::PROJECT_KEY),
            Decider::User(name) => write!(f, "{}{name}", Self::USER),
            Decider::Named(name) => f.write_str(name),
        }
    }
}

impl PartialEq<str> for Decider {
    fn eq(&self, other: &str) -> bool {
        *self == Decider::parse(other)
    }
}

impl PartialEq<&str> for Decider {
    fn eq(&self, other: &&str) -> bool {
        *self == Decider::parse(other)
    }
}

impl From<&str> for Decider {
    fn from(name: &str) -> Self {
        Decider::parse(name)
    }
}

impl Serialize for Decider {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Decider {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(Decider::parse(&name))
    }
}

impl ts_rs::TS for Decider {
    type WithoutGenerics = Self;
    type OptionInnerType = Self;
    fn name(_: &ts_rs::Config) -> String {
        "string".into()
    }
    fn inline(_: &ts_rs::Config) -> String {
        "string".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deciders_read_back_as_they_were_written() {
        let session = Uuid::new_v4();
        for (decider, text) in [
            (Decider::System, "stead".to_owned()),
            (Decider::Local, "local".to_owned()),
            (Decider::ApiKey("ab12".into()), "api_key:ab12".to_owned()),
            (
                Decider::SessionToken(session),
                format!("session_token:{session}"),
            ),
            (
                Decider::ProjectKey(session),
                format!("project_key:{session}"),
            ),
            (Decider::Named("ada".into()), "ada".to_owned()),
        ] {
            assert_eq!(decider.to_string(), text);
            assert_eq!(Decider::parse(&text), decider);
            let json = serde_json::to_value(&decider).unwrap();
            assert_eq!(json, serde_json::Value::String(text));
            assert_eq!(serde_json::from_value::<Decider>(json).unwrap(), decider);
        }
    }

    #[test]
    fn any_session_token_spelling_is_a_session_token() {
        assert!(Decider::parse("session_token:not-a-uuid").is_session_token());
        assert!(!Decider::parse("api_key:x").is_session_token());
        assert!(!Decider::parse("session").is_session_token());
    }

    #[test]
    fn ids_serialize_as_their_bare_values() {
        assert_eq!(
            serde_json::to_value(CallId::new("call_1")).unwrap(),
            serde_json::json!("call_1")
        );
        assert_eq!(
            serde_json::to_value(Epoch(7)).unwrap(),
            serde_json::json!(7)
        );
        let id: CallId = serde_json::from_str("\"c\"").unwrap();
        assert_eq!(id, "c");
    }
}
