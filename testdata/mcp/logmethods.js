// A minimal stdio MCP server that logs to stderr every message it receives
// ("recv <method>", or "reply <id> <error code|ok>" for answers to its own requests).
// After the handshake it asks the client for a method no client offers (foo/bar) and
// for a ping, so a test can see how the client answers both.
const readline = require("readline");
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let m;
  try { m = JSON.parse(line); } catch { console.error("unparsable"); return; }
  if (m.method === undefined) {
    console.error(`reply ${m.id} ${m.error ? m.error.code : "ok"}`);
    return;
  }
  console.error(`recv ${m.method}`);
  switch (m.method) {
    case "initialize":
      send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "logmethods", version: "1" } } });
      break;
    case "notifications/initialized":
      send({ jsonrpc: "2.0", id: "s1", method: "foo/bar", params: {} });
      send({ jsonrpc: "2.0", id: "s2", method: "ping" });
      break;
    case "tools/list":
      send({ jsonrpc: "2.0", id: m.id, result: { tools: [] } });
      break;
    case "ping":
      send({ jsonrpc: "2.0", id: m.id, result: {} });
      break;
    default:
      if (m.id !== undefined) send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
  }
});
