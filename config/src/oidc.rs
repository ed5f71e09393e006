//! Single sign-on (`[server.oidc]`): the settings' types live with the HTTP edge that uses
//! them (`stead_http::auth::oidc_config`).

pub use stead_http::auth::oidc_config::{OidcConfig, OidcMapping};
