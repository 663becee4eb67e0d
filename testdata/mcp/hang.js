// A tiny MCP server over stdio for the tests in internal/mcp, using only node
// built-ins. It answers initialize, ping and tools/list, and offers these tools:
//   hang — never answers its tools/call (the client must time out);
//   ask  — sends the client a sampling/createMessage request and returns the
//          client's answer as text (the client must answer, not hang);
//   big  — returns 300,000 bytes of text (the client must cut it);
//   fail — returns an isError result;
//   grow — adds a tool "extra" and sends notifications/tools/list_changed.
//   (either, pair: see HANG_SCHEMA_TOOLS below.)
// Unknown methods get a JSON-RPC "method not found" error.
"use strict";
const readline = require("node:readline");

const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
const pending = new Map(); // our request id -> callback

const tools = [
  {
    name: "hang",
    description: "Never returns.",
    inputSchema: { type: "object", properties: {} },
  },
  {
    name: "ask",
    description: "Asks the client for a sampling completion.",
    inputSchema: { type: "object", properties: { prompt: { type: "string" } } },
  },
  { name: "big", description: "Returns a lot of text.", inputSchema: { type: "object" } },
  { name: "fail", description: "Always fails.", inputSchema: { type: "object" } },
  { name: "grow", description: "Adds a tool.", inputSchema: { type: "object" } },
];

// With HANG_SCHEMA_TOOLS=1 two tools whose schemas a lossy client would break:
//   either — anyOf at the top: "a" or "b" is required (so {} is invalid);
//   pair   — draft-07 tuple items (an array of exactly a string and a number).
if (process.env.HANG_SCHEMA_TOOLS) {
  tools.push(
    {
      name: "either",
      description: "Needs a or b.",
      inputSchema: {
        type: "object",
        properties: { a: { type: "string" }, b: { type: "string" } },
        anyOf: [{ required: ["a"] }, { required: ["b"] }],
      },
    },
    {
      name: "pair",
      description: "Takes a pair.",
      inputSchema: {
        $schema: "http://json-schema.org/draft-07/schema#",
        type: "object",
        properties: { p: { type: "array", items: [{ type: "string" }, { type: "number" }], additionalItems: false } },
        required: ["p"],
      },
    },
  );
}

const reply = (id, result) => send({ jsonrpc: "2.0", id, result });

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    return;
  }
  if (msg.method === undefined) {
    // A response to one of our requests.
    const cb = pending.get(msg.id);
    if (cb) {
      pending.delete(msg.id);
      cb(msg);
    }
    return;
  }
  if (msg.id === undefined) return; // a notification
  switch (msg.method) {
    case "initialize":
      send({
        jsonrpc: "2.0",
        id: msg.id,
        result: {
          protocolVersion: msg.params.protocolVersion,
          capabilities: { tools: { listChanged: true } },
          serverInfo: { name: "hang", version: "1.0.0" },
        },
      });
      return;
    case "ping":
      send({ jsonrpc: "2.0", id: msg.id, result: {} });
      return;
    case "tools/list":
      send({ jsonrpc: "2.0", id: msg.id, result: { tools } });
      return;
    case "tools/call":
      if (msg.params.name === "big") {
        reply(msg.id, { content: [{ type: "text", text: "x".repeat(300000) }] });
      } else if (msg.params.name === "fail") {
        reply(msg.id, { content: [{ type: "text", text: "the disk is on fire" }], isError: true });
      } else if (msg.params.name === "grow") {
        if (!tools.some((t) => t.name === "extra")) {
          tools.push({ name: "extra", description: "Added by grow.", inputSchema: { type: "object" } });
        }
        reply(msg.id, { content: [{ type: "text", text: "grown" }] });
        send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
      } else if (msg.params.name === "either" || msg.params.name === "pair") {
        reply(msg.id, { content: [{ type: "text", text: "ok " + JSON.stringify(msg.params.arguments) }] });
      } else if (msg.params.name === "extra") {
        reply(msg.id, { content: [{ type: "text", text: "extra works" }] });
      } else if (msg.params.name === "ask") {
        const id = "sampling-" + msg.id;
        pending.set(id, (reply) => {
          send({
            jsonrpc: "2.0",
            id: msg.id,
            result: { content: [{ type: "text", text: JSON.stringify(reply.error ?? reply.result) }] },
          });
        });
        send({
          jsonrpc: "2.0",
          id,
          method: "sampling/createMessage",
          params: {
            messages: [{ role: "user", content: { type: "text", text: msg.params.arguments?.prompt ?? "hi" } }],
            maxTokens: 10,
          },
        });
      }
      return; // "hang": never answer
    default:
      send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "Method not found" } });
  }
});
console.error("hang server ready");
