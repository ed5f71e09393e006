//! MCP servers as sources of agent tools (issue 17, first part): a client for one MCP server
//! over stdio — a child process Stead starts — built on the official Rust SDK (`rmcp`), and
//! [`McpTool`], one of its tools as a Stead [`Tool`].
//!
//! Not wired to the configuration yet: `[[mcp_servers]]`, Streamable HTTP, progress frames and
//! cancellation come next (docs/design/mcp-client-research.md holds the API notes). What this
//! part does, and its tests check against a real server from npm:
//! - `connect` spawns the server and runs `initialize`; `tools` lists every page of its tools;
//! - a call carries the Stead idempotency key in `_meta` (`io.stead/idempotencyKey`: MCP has
//!   none of its own, so MCP tools default to not idempotent) and has a timeout;
//! - a result's content is kept as JSON (text as is; images and audio as their MIME type and
//!   size, without the base64 payload; resources as sent) beside `structuredContent`, and an
//!   `isError` result becomes the tool's error for the model;
//! - a server that exited fails the call in flight clearly and is started again for the next.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, ClientRequest, JsonObject, Request, RequestMetaObject};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use stead_actors::policy::ApprovalPolicy;
use stead_actors::tools::{Tool, ToolContext, ToolError};
use tokio::sync::Mutex;

/// The `_meta` key that carries a call's idempotency key.
pub const IDEMPOTENCY_META_KEY: &str = "io.stead/idempotencyKey";

/// How to start a stdio MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServer {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// A tool a server offers, as `tools/list` described it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

type Client = RunningService<RoleClient, ()>;

/// One MCP server: its connection, started again when the process is gone.
pub struct McpServer {
    config: StdioServer,
    client: Mutex<Option<Arc<Client>>>,
}

impl McpServer {
    /// Starts the server and initializes the session.
    pub async fn connect(config: StdioServer, timeout: Duration) -> anyhow::Result<Arc<Self>> {
        let server = Arc::new(McpServer {
            config,
            client: Mutex::new(None),
        });
        server
            .client(timeout)
            .await
            .map_err(|e| anyhow::anyhow!(e.0))?;
        Ok(server)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The live connection, or a new one when there is none or its process is gone.
    async fn client(&self, timeout: Duration) -> Result<Arc<Client>, ToolError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.peer().is_transport_closed() {
                return Ok(client.clone());
            }
            tracing::warn!(server = %self.config.name, "the MCP server's connection closed; starting it again");
        }
        let name = &self.config.name;
        let mut command = tokio::process::Command::new(&self.config.command);
        command.args(&self.config.args).envs(&self.config.env);
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| ToolError(format!("cannot start the MCP server `{name}`: {e}")))?;
        let client = tokio::time::timeout(timeout, ().serve(transport))
            .await
            .map_err(|_| {
                ToolError(format!(
                    "the MCP server `{name}` did not initialize within {timeout:?}"
                ))
            })?
            .map_err(|e| ToolError(format!("the MCP server `{name}` failed to initialize: {e}")))?;
        let client = Arc::new(client);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Every tool the server lists (all pages).
    pub async fn tools(&self, timeout: Duration) -> Result<Vec<ServerTool>, ToolError> {
        let client = self.client(timeout).await?;
        let name = &self.config.name;
        let tools = tokio::time::timeout(timeout, client.list_all_tools())
            .await
            .map_err(|_| {
                ToolError(format!(
                    "the MCP server `{name}` did not list its tools within {timeout:?}"
                ))
            })?
            .map_err(|e| {
                ToolError(format!(
                    "the MCP server `{name}` failed to list its tools: {e}"
                ))
            })?;
        Ok(tools
            .into_iter()
            .map(|tool| ServerTool {
                name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object((*tool.input_schema).clone()),
            })
            .collect())
    }

    /// Calls `tool` with `arguments` (a JSON object) and the call's idempotency key.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        context: &ToolContext,
        timeout: Duration,
    ) -> Result<Value, ToolError> {
        let name = &self.config.name;
        let Value::Object(arguments) = arguments else {
            return Err(ToolError("the arguments must be a JSON object".into()));
        };
        let client = self.client(timeout).await?;
        let mut meta = JsonObject::new();
        meta.insert(IDEMPOTENCY_META_KEY.into(), json!(context.idempotency_key));
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let options = PeerRequestOptions::with_timeout(timeout)
            .with_meta(RequestMetaObject(rmcp::model::MetaObject(meta)));
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let handle = client
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| {
                ToolError(format!(
                    "cannot send the call to the MCP server `{name}`: {e}"
                ))
            })?;
        let response = handle.await_response().await.map_err(|e| match e {
            rmcp::ServiceError::TransportClosed => ToolError(format!(
                "the MCP server `{name}` closed the connection during the call (did it exit?)"
            )),
            rmcp::ServiceError::Timeout { .. } => ToolError(format!(
                "the MCP server `{name}` did not answer within {timeout:?}"
            )),
            other => ToolError(format!("the MCP server `{name}` failed the call: {other}")),
        })?;
        let rmcp::model::ServerResult::CallToolResult(result) = response else {
            return Err(ToolError(format!(
                "the MCP server `{name}` answered the call with something else than a tool result"
            )));
        };
        let result = serde_json::to_value(&result)
            .map_err(|e| ToolError(format!("cannot read the MCP server `{name}`'s result: {e}")))?;
        tool_result(result)
    }
}

/// A `CallToolResult` (as JSON) as a Stead tool result: `{"content": […], "structured"?: …}`,
/// or the tool's error when `isError` is set (its text content joined).
pub fn tool_result(result: Value) -> Result<Value, ToolError> {
    let content: Vec<Value> = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .map(content_block)
        .collect();
    if result["isError"] == json!(true) {
        let text: Vec<&str> = content.iter().filter_map(|c| c["text"].as_str()).collect();
        let message = if text.is_empty() {
            "the MCP tool reported an error".to_string()
        } else {
            text.join("\n")
        };
        return Err(ToolError(message));
    }
    let mut out = json!({ "content": content });
    if let Some(structured) = result.get("structuredContent") {
        out["structured"] = structured.clone();
    }
    Ok(out)
}

/// One content block, with the base64 payload of images and audio replaced by its size.
fn content_block(block: &Value) -> Value {
    let mut block = block.clone();
    if matches!(block["type"].as_str(), Some("image" | "audio")) {
        if let Some(data) = block.get("data").and_then(Value::as_str) {
            let bytes = data.len() / 4 * 3 - data.bytes().rev().take_while(|&b| b == b'=').count();
            block["bytes"] = json!(bytes);
        }
        if let Some(object) = block.as_object_mut() {
            object.remove("data");
        }
    }
    block
}

/// One MCP tool as an agent's tool: `{server}__{tool}` to the model.
pub struct McpTool {
    pub server: Arc<McpServer>,
    pub remote: ServerTool,
    pub name: String,
    pub approval: ApprovalPolicy,
    pub idempotent: bool,
    pub timeout: Duration,
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.remote.description
    }
    fn parameters(&self) -> Value {
        self.remote.input_schema.clone()
    }
    fn approval(&self) -> &ApprovalPolicy {
        &self.approval
    }
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        self.server
            .call(&self.remote.name, arguments, context, self.timeout)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_result_becomes_the_tools_error_and_payloads_are_dropped() {
        let error = tool_result(json!({
            "content": [{"type": "text", "text": "no such file"}], "isError": true
        }));
        assert_eq!(error, Err(ToolError("no such file".into())));
        let ok = tool_result(json!({
            "content": [{"type": "image", "mimeType": "image/png", "data": "aGVsbG8="}],
            "structuredContent": {"temperature": 21}
        }))
        .unwrap();
        assert_eq!(
            ok,
            json!({
                "content": [{"type": "image", "mimeType": "image/png", "bytes": 5}],
                "structured": {"temperature": 21}
            })
        );
    }
}
