// `@stead/client`: Stead's REST API and session WebSockets from TypeScript, in browsers and in
// Node 18 or later (docs/clients.md). The wire types are generated from the server's Rust types.

export * from "./evals.js";
export * from "./protocol.js";
export * from "./rest.js";
export * from "./session.js";
export * from "./view.js";
