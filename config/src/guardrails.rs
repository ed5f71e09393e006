//! `[[guardrails]]` checked (docs/guardrails.md): each one builds (unique names, known kinds and
//! entities, patterns that compile, a `judge` with its route and rubric), every route and
//! agent names configured ones, the routes a model check asks exist and run no model check
//! themselves (a check would ask itself), and a route's guardrails are ones a route can run
//! (no `approve`: no one waits on a gateway call).

use crate::Config;
use stead_guardrails::{GuardrailAction, GuardrailConfig};

/// The first problem, as `(key, problem)`.
pub(crate) fn check(config: &Config) -> Result<(), (String, String)> {
    stead_guardrails::Guardrails::build(&config.guardrails)
        .map_err(|e| ("guardrails".to_string(), e.to_string()))?;
    let named = |key: String, name: &String| -> Result<&GuardrailConfig, (String, String)> {
        config
            .guardrails
            .iter()
            .find(|g| &g.name == name)
            .ok_or_else(|| (key, format!("no [[guardrails]] entry is named `{name}`")))
    };
    for route in &config.routes {
        let key = format!("routes.{}.guardrails", route.name);
        for name in &route.guardrails {
            let guardrail = named(key.clone(), name)?;
            if guardrail.action == GuardrailAction::Approve {
                return Err((
                    key,
                    format!(
                        "guardrail `{name}` holds text for a person (`approve`), which only an \
                         agent's tool results can wait for: attach it to agents"
                    ),
                ));
            }
        }
    }
    for agent in &config.agents {
        let key = format!("agents.{}.guardrails", agent.name);
        for name in &agent.guardrails {
            named(key.clone(), name)?;
        }
    }
    for guardrail in &config.guardrails {
        if let Some(route) = &guardrail.route {
            let key = format!("guardrails.{}.route", guardrail.name);
            let Some(asked) = config.routes.iter().find(|r| &r.name == route) else {
                return Err((key, format!("no [[routes]] entry is named `{route}`")));
            };
            let asks_a_model = |name: &String| {
                config
                    .guardrails
                    .iter()
                    .any(|g| &g.name == name && g.route.is_some())
            };
            if let Some(own) = asked.guardrails.iter().find(|g| asks_a_model(g)) {
                return Err((
                    key,
                    format!(
                        "route `{route}` runs guardrail `{own}`, which asks a model too: the \
                         route a model check asks must not (it would ask itself)"
                    ),
                ));
            }
        }
    }
    Ok(())
}
