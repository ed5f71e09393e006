//! `[[guardrails]]` checked (docs/guardrails.md): each one builds (unique names, known kinds and
//! entities, patterns that compile), and every route names configured ones.

use crate::Config;

/// The first problem, as `(key, problem)`.
pub(crate) fn check(config: &Config) -> Result<(), (String, String)> {
    stead_guardrails::Guardrails::build(&config.guardrails)
        .map_err(|e| ("guardrails".to_string(), e.to_string()))?;
    for route in &config.routes {
        for name in &route.guardrails {
            if !config.guardrails.iter().any(|g| &g.name == name) {
                return Err((
                    format!("routes.{}.guardrails", route.name),
                    format!("no [[guardrails]] entry is named `{name}`"),
                ));
            }
        }
    }
    Ok(())
}
