//! Validation of a loaded configuration: every value and cross-reference, with errors that
//! name the bad key.

use std::net::SocketAddr;

use super::{Config, ConfigError, ProviderKind, ToolConfig, ToolKind, DEFAULT_LISTEN, MEMORY_OPS};
use stead_actors::schedule_tool::ScheduleTool;
use stead_persistence::DatabaseUrl;

fn bad(key: &str, problem: impl std::fmt::Display) -> ConfigError {
    ConfigError(format!("invalid configuration: {key}: {problem}"))
}

impl Config {
    /// Checks every value and cross-reference, naming the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let listen: SocketAddr = self.server.listen.parse().map_err(|_| {
            bad(
                "server.listen",
                format!(
                    "`{}` is not a socket address (expected IP:PORT, e.g. {DEFAULT_LISTEN})",
                    self.server.listen
                ),
            )
        })?;
        for (i, key) in self.server.api_keys.iter().enumerate() {
            let name = format!("server.api_keys[{i}]");
            if let Some(digest) = key.strip_prefix("sha256:") {
                if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(bad(&name, "a sha256: key needs 64 hex digits"));
                }
            } else if key.len() < 16 {
                return Err(bad(&name, "an API key needs at least 16 characters"));
            }
        }
        if !listen.ip().is_loopback() && self.server.api_keys.is_empty() {
            return Err(bad(
                "server.listen",
                format!(
                    "{listen} is not a loopback address and server.api_keys is empty; \
                     configure API keys before listening off loopback"
                ),
            ));
        }
        for (i, host) in self.server.allowed_hosts.iter().enumerate() {
            let name = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            if !name && host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad(
                    &format!("server.allowed_hosts[{i}]"),
                    format!("`{host}` is not a host name or address (no port, no scheme)"),
                ));
            }
        }
        for (i, origin) in self.server.cors_origins.iter().enumerate() {
            if !stead_http::cors::is_origin(origin) {
                return Err(bad(
                    &format!("server.cors_origins[{i}]"),
                    format!(
                        "`{origin}` is not an origin: write scheme, host and port only \
                         (`https://app.example.com`, `http://localhost:5173`); `*` is not \
                         allowed, list each site"
                    ),
                ));
            }
        }
        for (name, value) in [
            ("header_timeout_secs", self.server.header_timeout_secs),
            ("body_timeout_secs", self.server.body_timeout_secs),
            ("max_connections", self.server.max_connections as u64),
            (
                "max_websockets_per_session",
                self.server.max_websockets_per_session as u64,
            ),
            ("ws_heartbeat_secs", self.server.ws_heartbeat_secs),
        ] {
            if value == 0 {
                return Err(bad(&format!("server.{name}"), "must be at least 1"));
            }
        }
        if self.server.data_dir.as_os_str().is_empty() {
            return Err(bad("server.data_dir", "must not be empty"));
        }
        if let Some(url) = &self.database.url {
            DatabaseUrl::parse(url).map_err(|e| bad("database.url", e))?;
        }
        if self.database.max_event_bytes == 0 {
            return Err(bad("database.max_event_bytes", "must be at least 1"));
        }
        if self.database.max_connections == 0 {
            return Err(bad("database.max_connections", "must be at least 1"));
        }
        if self.database.connect_timeout_secs == 0 {
            return Err(bad("database.connect_timeout_secs", "must be at least 1"));
        }
        let s = &self.sessions;
        for (name, value) in [
            ("snapshot_every", s.snapshot_every.max(0) as u64),
            ("passivate_after_secs", s.passivate_after_secs),
            ("passivate_parked_after_secs", s.passivate_parked_after_secs),
            ("restart_limit", s.restart_limit as u64),
            ("restart_window_secs", s.restart_window_secs),
            ("lease_ttl_secs", s.lease_ttl_secs),
            ("max_queued_messages", s.max_queued_messages as u64),
        ] {
            if value == 0 {
                return Err(bad(&format!("sessions.{name}"), "must be at least 1"));
            }
        }
        let t = &self.schedules;
        for (name, value) in [
            ("min_interval_secs", t.min_interval_secs),
            ("max_per_session", t.max_per_session as u64),
            ("max_firings_per_hour", t.max_firings_per_hour.into()),
            ("poll_ms", t.poll_ms),
        ] {
            if value == 0 {
                return Err(bad(&format!("schedules.{name}"), "must be at least 1"));
            }
        }
        self.validate_cluster()?;
        self.validate_budget_alerts()?;
        crate::guardrails::check(self).map_err(|(key, problem)| bad(&key, problem))?;
        if let Some((key, problem)) = self.speech.problem().or(self.artifacts.problem()) {
            return Err(bad(key, problem));
        }
        if let Some(oidc) = &self.server.oidc {
            oidc.check().map_err(|e| bad("server.oidc", e))?;
        }
        self.validate_models()?;
        self.validate_knowledge()?;
        self.validate_agents()
    }

    /// `[cluster]` needs PostgreSQL, a node id, an http(s) address and sane timings.
    fn validate_budget_alerts(&self) -> Result<(), ConfigError> {
        let alerts = &self.budget_alerts;
        if !(alerts.share > 0.0 && alerts.share <= 1.0) {
            return Err(bad(
                "budget_alerts.share",
                format!("{} is not a share (0 < share ≤ 1)", alerts.share),
            ));
        }
        if !(alerts.timeout_secs > 0.0 && alerts.timeout_secs <= 60.0) {
            return Err(bad(
                "budget_alerts.timeout_secs",
                "must be over 0 and at most 60",
            ));
        }
        if let Some(url) = &alerts.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad(
                    "budget_alerts.url",
                    "must be an http:// or https:// URL",
                ));
            }
        }
        Ok(())
    }

    fn validate_cluster(&self) -> Result<(), ConfigError> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        if !matches!(self.database_url(), DatabaseUrl::Postgres(_)) {
            return Err(bad(
                "cluster",
                "nodes share their sessions through PostgreSQL: set database.url to a postgres:// URL",
            ));
        }
        if self.server.node_id.as_deref().is_none_or(str::is_empty) {
            return Err(bad(
                "server.node_id",
                "a node of a cluster needs a stable id of its own",
            ));
        }
        let url = cluster.advertise_url.as_str();
        // Nodes talk plain HTTP: this build has no TLS client (put the nodes on a private
        // network, or behind a mesh that encrypts).
        let ok = url::Url::parse(url).is_ok_and(|u| u.scheme() == "http" && u.host().is_some());
        if !ok {
            return Err(bad(
                "cluster.advertise_url",
                format!("`{url}` is not an http:// URL other nodes can reach"),
            ));
        }
        if cluster.secret_env.is_empty() {
            return Err(bad(
                "cluster.secret_env",
                "name the environment variable that holds the cluster secret",
            ));
        }
        if cluster.secret_env.starts_with("STEAD_") {
            return Err(bad(
                "cluster.secret_env",
                "STEAD_* variables are configuration settings; name one outside that prefix \
                 (e.g. CLUSTER_SECRET)",
            ));
        }
        for (name, value) in [
            ("heartbeat_secs", cluster.heartbeat_secs),
            ("node_ttl_secs", cluster.node_ttl_secs),
            ("sweep_secs", cluster.sweep_secs),
        ] {
            if value == 0 {
                return Err(bad(&format!("cluster.{name}"), "must be at least 1"));
            }
        }
        if cluster.node_ttl_secs < 2 * cluster.heartbeat_secs {
            return Err(bad(
                "cluster.node_ttl_secs",
                "must be at least twice heartbeat_secs (one late beat must not kill a node)",
            ));
        }
        Ok(())
    }

    fn validate_knowledge_tool(&self, key: &str, tool: &ToolConfig) -> Result<(), ConfigError> {
        if tool.kind != ToolKind::Knowledge {
            for (field, set) in [
                ("collections", tool.collections.is_some()),
                ("top_k", tool.top_k.is_some()),
                ("search", tool.search.is_some()),
            ] {
                if set {
                    return Err(bad(
                        &format!("{key}.{field}"),
                        "only for kind \"knowledge\"",
                    ));
                }
            }
            return Ok(());
        }
        match &tool.collections {
            Some(names) if !names.is_empty() && names.iter().all(|n| !n.is_empty()) => {}
            _ => {
                return Err(bad(
                    &format!("{key}.collections"),
                    "required for kind \"knowledge\": a non-empty list of collection names",
                ))
            }
        }
        if let Some(k) = tool.top_k {
            if !(1..=self.knowledge.max_top_k).contains(&k) {
                return Err(bad(
                    &format!("{key}.top_k"),
                    format!(
                        "must be from 1 to knowledge.max_top_k ({})",
                        self.knowledge.max_top_k
                    ),
                ));
            }
        }
        if let Some(search) = &tool.search {
            if crate::SearchMode::parse(search).is_none() {
                return Err(bad(
                    &format!("{key}.search"),
                    format!("`{search}` is not one of exact, ann, hybrid"),
                ));
            }
        }
        Ok(())
    }

    fn validate_knowledge(&self) -> Result<(), ConfigError> {
        let k = &self.knowledge;
        if k.chunk_words < 8 {
            return Err(bad("knowledge.chunk_words", "must be at least 8"));
        }
        if k.chunk_overlap_words >= k.chunk_words / 2 {
            return Err(bad(
                "knowledge.chunk_overlap_words",
                "must be under half of chunk_words",
            ));
        }
        if k.max_document_bytes == 0 {
            return Err(bad("knowledge.max_document_bytes", "must be at least 1"));
        }
        if !(1..=1000).contains(&k.max_top_k) {
            return Err(bad("knowledge.max_top_k", "must be from 1 to 1000"));
        }
        Ok(())
    }

    fn validate_models(&self) -> Result<(), ConfigError> {
        let mut seen = Vec::new();
        for (i, provider) in self.providers.iter().enumerate() {
            let key = format!("providers[{i}]");
            if provider.name.is_empty() || seen.contains(&&provider.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is empty or used twice", provider.name),
                ));
            }
            seen.push(&provider.name);
            match provider.kind {
                ProviderKind::Onnx | ProviderKind::OnnxEmbedding
                    if provider.model_dir.is_none() =>
                {
                    return Err(bad(
                        &format!("{key}.model_dir"),
                        "required for local models",
                    ));
                }
                ProviderKind::Onnx if provider.engine.prefix_cache_min_tokens == 0 => {
                    return Err(bad(
                        &format!("{key}.prefix_cache_min_tokens"),
                        "must be at least 1",
                    ));
                }
                ProviderKind::Openai | ProviderKind::Anthropic => {
                    let base = provider.base_url.as_deref().ok_or_else(|| {
                        bad(
                            &format!("{key}.base_url"),
                            "required for kinds \"openai\" and \"anthropic\"",
                        )
                    })?;
                    match url::Url::parse(base) {
                        Ok(url) if matches!(url.scheme(), "http" | "https") => {}
                        _ => {
                            return Err(bad(
                                &format!("{key}.base_url"),
                                format!("`{base}` is not an http(s) URL"),
                            ))
                        }
                    }
                    if provider.max_answer_mib == Some(0) {
                        return Err(bad(&format!("{key}.max_answer_mib"), "must be at least 1"));
                    }
                }
                _ => {}
            }
        }
        let mut routes = Vec::new();
        for (i, route) in self.routes.iter().enumerate() {
            let key = format!("routes[{i}]");
            if route.name.is_empty() || routes.contains(&&route.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is empty or used twice", route.name),
                ));
            }
            routes.push(&route.name);
            if route.targets.is_empty() {
                return Err(bad(&format!("{key}.targets"), "needs at least one target"));
            }
            for (j, target) in route.targets.iter().enumerate() {
                if !seen.contains(&&target.provider) {
                    return Err(bad(
                        &format!("{key}.targets[{j}].provider"),
                        format!("no provider is named `{}`", target.provider),
                    ));
                }
            }
            if let Some(problem) = route.problem() {
                return Err(ConfigError(format!(
                    "invalid configuration: {key}.{problem}"
                )));
            }
        }
        if let Some(problem) = self.gateway.problem() {
            return Err(ConfigError(format!(
                "invalid configuration: gateway.{problem}"
            )));
        }
        Ok(())
    }

    fn validate_agents(&self) -> Result<(), ConfigError> {
        let mut agents = Vec::new();
        self.validate_mcp_servers()?;
        for (i, agent) in self.agents.iter().enumerate() {
            let key = format!("agents[{i}]");
            if agent.name.is_empty() || agents.contains(&&agent.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is empty or used twice", agent.name),
                ));
            }
            agents.push(&agent.name);
            if !self.routes.iter().any(|r| r.name == agent.route) {
                return Err(bad(
                    &format!("{key}.route"),
                    format!("no route is named `{}`", agent.route),
                ));
            }
            if agent.max_steps == 0 {
                return Err(bad(&format!("{key}.max_steps"), "must be at least 1"));
            }
            if let Some(route) = &agent.context.summary_route {
                if !self.routes.iter().any(|r| &r.name == route) {
                    return Err(bad(
                        &format!("{key}.context.summary_route"),
                        format!("no route is named `{route}`"),
                    ));
                }
            }
            if agent.context.max_prompt_tokens.is_some_and(|n| n < 256) {
                return Err(bad(
                    &format!("{key}.context.max_prompt_tokens"),
                    "must be at least 256",
                ));
            }
            if agent.context.max_tool_result_tokens == 0 {
                return Err(bad(
                    &format!("{key}.context.max_tool_result_tokens"),
                    "must be at least 1",
                ));
            }
            if agent.approval_timeout_secs == Some(0) {
                return Err(bad(
                    &format!("{key}.approval_timeout_secs"),
                    "must be at least 1 (leave it out for no expiry)",
                ));
            }
            for (name, template) in &agent.callbacks {
                let at = format!("{key}.callbacks.{name}");
                if !stead_actors::schedules::valid_key(name) {
                    return Err(bad(&at, "a name of letters, digits, `-`, `_` and `.`"));
                }
                stead_actors::schedules::check_template(template).map_err(|e| bad(&at, e))?;
            }
            let mut tools = Vec::new();
            for (j, tool) in agent.tools.iter().enumerate() {
                let key = format!("{key}.tools[{j}]");
                if tool.kind == ToolKind::Mcp {
                    self.validate_mcp_tool(&key, tool)?;
                    continue;
                }
                if tool.server.is_some() || tool.tools.is_some() {
                    return Err(bad(&format!("{key}.server"), "only for kind \"mcp\""));
                }
                if tool.name.is_empty() || tools.contains(&&tool.name) {
                    return Err(bad(
                        &format!("{key}.name"),
                        format!("`{}` is empty or used twice", tool.name),
                    ));
                }
                tools.push(&tool.name);
                if tool.kind == ToolKind::Agent {
                    match tool.agent.as_deref() {
                        None => {
                            return Err(bad(&format!("{key}.agent"), "required for kind \"agent\""))
                        }
                        // No depth limit exists yet: an agent that delegates to itself would
                        // never stop.
                        Some(name) if name == agent.name => {
                            return Err(bad(
                                &format!("{key}.agent"),
                                "an agent cannot delegate to itself",
                            ))
                        }
                        Some(name) if !self.agents.iter().any(|a| a.name == name) => {
                            return Err(bad(
                                &format!("{key}.agent"),
                                format!("no agent is named `{name}`"),
                            ))
                        }
                        Some(_) => {}
                    }
                } else if tool.agent.is_some() {
                    return Err(bad(&format!("{key}.agent"), "only for kind \"agent\""));
                }
                self.validate_knowledge_tool(&key, tool)?;
                if tool.kind == ToolKind::Webhook && tool.url.is_none() {
                    return Err(bad(&format!("{key}.url"), "required for kind \"webhook\""));
                }
                stead_actors::ApprovalPolicy::parse(&tool.approval)
                    .map_err(|e| bad(&format!("{key}.approval"), e))?;
                if tool.kind == ToolKind::Webhook && (tool.timeout_secs == 0 || tool.attempts == 0)
                {
                    return Err(bad(
                        &format!("{key}.timeout_secs"),
                        "timeout_secs and attempts must be at least 1",
                    ));
                }
                if let Some(ops) = &tool.ops {
                    let offered: &[&str] = match tool.kind {
                        ToolKind::Memory => &MEMORY_OPS,
                        ToolKind::MemoryBlock => &stead_actors::memory_block::OPS,
                        ToolKind::Schedule => &ScheduleTool::OPS,
                        _ => {
                            return Err(bad(
                                &format!("{key}.ops"),
                                "only for kinds \"memory\", \"memory_block\" and \"schedule\"",
                            ))
                        }
                    };
                    subset(&format!("{key}.ops"), ops, offered)?;
                }
                if let Some(timings) = &tool.timings {
                    if tool.kind != ToolKind::Schedule {
                        return Err(bad(&format!("{key}.timings"), "only for kind \"schedule\""));
                    }
                    subset(&format!("{key}.timings"), timings, &ScheduleTool::TIMINGS)?;
                }
            }
        }
        Ok(())
    }

    fn validate_mcp_servers(&self) -> Result<(), ConfigError> {
        let mut names = Vec::new();
        for (i, server) in self.mcp_servers.iter().enumerate() {
            let key = format!("mcp_servers[{i}]");
            if let Some(why) = super::invalid_server_name(&server.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` {why}", server.name),
                ));
            }
            if names.contains(&&server.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is used twice", server.name),
                ));
            }
            names.push(&server.name);
            match (&server.command, &server.url) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(bad(
                        &key,
                        "give either `command` (stdio) or `url` (Streamable HTTP)",
                    ))
                }
                (Some(command), None) => {
                    if command.is_empty() {
                        return Err(bad(&format!("{key}.command"), "must not be empty"));
                    }
                    if !server.headers.is_empty() || !server.headers_env.is_empty() {
                        return Err(bad(&format!("{key}.headers"), "only with `url`"));
                    }
                }
                (None, Some(url)) => {
                    let parsed = url::Url::parse(url)
                        .map_err(|e| bad(&format!("{key}.url"), format!("not a URL: {e}")))?;
                    if parsed.scheme() != "http" {
                        return Err(bad(
                            &format!("{key}.url"),
                            "must be http:// (TLS ends at a proxy in front, as for providers)",
                        ));
                    }
                    if !server.args.is_empty() || !server.env.is_empty() {
                        return Err(bad(&format!("{key}.args"), "only with `command`"));
                    }
                }
            }
            if server.start_timeout_secs == 0 || server.call_timeout_secs == 0 {
                return Err(bad(
                    &format!("{key}.call_timeout_secs"),
                    "start_timeout_secs and call_timeout_secs must be at least 1",
                ));
            }
        }
        Ok(())
    }

    fn validate_mcp_tool(&self, key: &str, tool: &super::ToolConfig) -> Result<(), ConfigError> {
        let Some(server) = &tool.server else {
            return Err(bad(&format!("{key}.server"), "required for kind \"mcp\""));
        };
        if !self.mcp_servers.iter().any(|s| &s.name == server) {
            return Err(bad(
                &format!("{key}.server"),
                format!("no [[mcp_servers]] entry is named `{server}`"),
            ));
        }
        if let Some(globs) = &tool.tools {
            if globs.is_empty() || globs.iter().any(|g| g.is_empty()) {
                return Err(bad(
                    &format!("{key}.tools"),
                    "a non-empty list of tool names or globs (leave it out for all)",
                ));
            }
        }
        if tool.url.is_some() || tool.parameters.is_some() || tool.ops.is_some() {
            return Err(bad(
                key,
                "`url`, `parameters` and `ops` are not for kind \"mcp\" (the server describes its tools)",
            ));
        }
        stead_actors::ApprovalPolicy::parse(&tool.approval)
            .map_err(|e| bad(&format!("{key}.approval"), e))?;
        Ok(())
    }
}

/// `values` must be a non-empty list drawn from `offered`.
fn subset(key: &str, values: &[String], offered: &[&str]) -> Result<(), ConfigError> {
    if values.is_empty() || values.iter().any(|v| !offered.contains(&v.as_str())) {
        return Err(bad(
            key,
            format!("a non-empty list of {}", offered.join(", ")),
        ));
    }
    Ok(())
}
