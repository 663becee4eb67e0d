// A tiny MCP server over stdio for the sandbox tests in internal/mcp, using only node
// built-ins. Its one tool, "fetch", GETs the URL it is given and returns the status and
// body, or the connection error as an isError result (a sandbox without network must
// make it fail).
"use strict";
const http = require("node:http");
const readline = require("node:readline");

const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
const reply = (id, result) => send({ jsonrpc: "2.0", id, result });
const text = (id, t, isError) => reply(id, { content: [{ type: "text", text: t }], isError });

const tools = [
  {
    name: "fetch",
    description: "GETs a URL.",
    inputSchema: { type: "object", properties: { url: { type: "string" } }, required: ["url"] },
  },
];

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    return;
  }
  if (msg.id === undefined || msg.method === undefined) return;
  switch (msg.method) {
    case "initialize":
      reply(msg.id, {
        protocolVersion: msg.params.protocolVersion,
        capabilities: { tools: {} },
        serverInfo: { name: "fetch", version: "1.0.0" },
      });
      return;
    case "ping":
      reply(msg.id, {});
      return;
    case "tools/list":
      reply(msg.id, { tools });
      return;
    case "tools/call": {
      const req = http.get(msg.params.arguments.url, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d) => (body += d));
        res.on("end", () => text(msg.id, `status ${res.statusCode}: ${body}`));
      });
      req.on("error", (err) => text(msg.id, `fetch failed: ${err.code || ""} ${err.message}`, true));
      req.setTimeout(5000, () => req.destroy(new Error("timed out")));
      return;
    }
    default:
      send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "Method not found" } });
  }
});
