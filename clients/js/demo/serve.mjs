// Serves the demo page (demo/) and the client (dist/) on 127.0.0.1, and,
// run as a program, prints the page's address with a token for a user:
//
//   node demo/serve.mjs --secret FILE [--user alice] [--gateway ws://127.0.0.1:8080/ws] [--port 8081]
//
// The token is HS256 with the gateway's --jwt-secret-file: for the demo
// only (a real app gets its token from its own login backend).

import { createHmac } from "node:crypto";
import { readFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const types = { ".html": "text/html", ".js": "text/javascript", ".map": "application/json" };

/** Starts the page server on 127.0.0.1:`port` (0: any free port); resolves the server. */
export async function startDemoServer(port = 0) {
  const server = createServer(async (req, res) => {
    const path = normalize(new URL(req.url, "http://x").pathname);
    const file = path.startsWith("/dist/") ? join(root, path) : join(root, "demo", path === "/" ? "index.html" : path);
    try {
      const body = await readFile(file);
      res.writeHead(200, { "content-type": types[file.slice(file.lastIndexOf("."))] ?? "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((r) => server.listen(port, "127.0.0.1", r));
  return server;
}

/** An HS256 token for `sub` with `secret`, valid for `seconds`. */
export function demoToken(secret, sub, seconds = 24 * 3600) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const input = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({ sub, exp: Math.floor(Date.now() / 1000) + seconds, channels: ["news"] })}`;
  return `${input}.${createHmac("sha256", secret).update(input).digest("base64url")}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      secret: { type: "string" },
      user: { type: "string", default: "alice" },
      gateway: { type: "string", default: "ws://127.0.0.1:8080/ws" },
      port: { type: "string", default: "8081" },
    },
  });
  if (!values.secret) {
    console.error("usage: node demo/serve.mjs --secret FILE [--user alice] [--gateway URL] [--port 8081]");
    process.exit(2);
  }
  const secret = readFileSync(values.secret, "utf8").trim();
  const server = await startDemoServer(Number(values.port));
  const token = demoToken(secret, values.user);
  console.log(`demo page: http://127.0.0.1:${server.address().port}/?url=${encodeURIComponent(values.gateway)}&token=${token}`);
}
