// `@stead/ai-sdk`: a Stead session behind the Vercel AI SDK's `useChat` (docs/clients.md): a chat
// transport that speaks the UI-message stream (text, dynamic tool parts, tool-approval requests
// and responses), resumes a running answer after a reload, and turns a session's journal into
// the chat's messages.

export { SteadChatTransport, messagesFromJournal, type SteadChatTransportOptions } from "./transport.js";
export { TurnTranslator, type TurnState } from "./translate.js";
