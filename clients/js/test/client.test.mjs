// The JavaScript client against a real switchyard-gateway and broker
// (harness.mjs), with Node's own WebSocket (--experimental-websocket).

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { SwitchyardClient, reconnectDelay, retryHint } from "../dist/index.js";
import { Stack, sleep, token, waitFor } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** A client for `user` on the stack's gateway, recording what it gets. */
function clientOf(stack, user, options = {}) {
  const got = { messages: [], offers: [], states: [], publications: [], trimmed: [], withdrawn: [], tokens: 0 };
  const c = new SwitchyardClient({
    url: stack.url,
    token: () => {
      ++got.tokens;
      return options.token ? options.token(got.tokens) : token(user);
    },
    backoff: { baseMs: 50, maxMs: 500, stableAfterMs: 60_000 },
    ...options.client,
  });
  c.on("message", (m) => got.messages.push(m));
  c.on("offer", (o) => got.offers.push(o));
  c.on("state", (s) => got.states.push(s));
  c.on("publication", (p) => got.publications.push(p));
  c.on("trimmed", (t) => got.trimmed.push(t));
  c.on("withdrawn", (id) => got.withdrawn.push(id));
  return { c, got };
}

const connected = (c) => waitFor(() => c.state === "connected");

test("the backoff is full jitter under a capped ceiling, with the server's hint as a floor", () => {
  const b = { baseMs: 500, maxMs: 30_000, stableAfterMs: 30_000 };
  assert.equal(reconnectDelay(0, b, () => 0.999), 499);
  assert.equal(reconnectDelay(3, b, () => 0.5), 2000);  // ceiling 4000
  assert.equal(reconnectDelay(10, b, () => 0.5), 15_000);  // capped at 30000
  assert.equal(reconnectDelay(100, b, () => 0.5), 15_000);
  assert.equal(reconnectDelay(0, b, () => 0, 1200), 1200);  // the hint is a floor
  assert.equal(retryHint("going_away: retry_after_ms=250"), 250);
  assert.equal(retryHint("heartbeat_timeout"), 0);
});

test("a client connects with its token and receives sends to its user", async () => {
  const stack = await new Stack().start();
  const { c, got } = clientOf(stack, "alice");
  try {
    let welcome;
    c.on("welcome", (w) => (welcome = w));
    c.connect();
    assert.ok(await connected(c));
    assert.equal(welcome.user, "alice");
    assert.deepEqual(welcome.caps, ["offers"]);
    const sent = await stack.cli("send", "user:alice", "hello from a service");
    assert.equal(sent.code, 0, sent.out);
    assert.ok(await waitFor(() => got.messages.length === 1));
    assert.equal(got.messages[0].data, "hello from a service");
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a client resumes after its gateway was killed: nothing lost, nothing repeated", async () => {
  const stack = await new Stack().start();
  const { c, got } = clientOf(stack, "alice");
  try {
    c.connect();
    assert.ok(await connected(c));
    for (let i = 1; i <= 3; ++i) assert.equal((await stack.cli("send", "user:alice", `m${i}`, "--stream", "u.alice")).code, 0);
    assert.ok(await waitFor(() => got.messages.length === 3));
    await stack.killGateway();  // kill -9: its lease and routes expire after 2 s
    assert.ok(await waitFor(() => c.state !== "connected"));
    // Sent while the user has no gateway: stored in the log only.
    for (let i = 4; i <= 5; ++i) await stack.cli("send", "user:alice", `m${i}`, "--stream", "u.alice");
    await stack.startGateway();  // the same port
    assert.ok(await connected(c), JSON.stringify(got.states.slice(-5)));
    assert.ok(await waitFor(() => got.messages.length === 5));
    assert.equal((await stack.cli("send", "user:alice", "m6", "--stream", "u.alice")).code, 0);
    assert.ok(await waitFor(() => got.messages.length === 6));
    await sleep(200);
    assert.deepEqual(got.messages.map((m) => m.data), ["m1", "m2", "m3", "m4", "m5", "m6"]);
    assert.deepEqual(got.messages.map((m) => m.seq), [1, 2, 3, 4, 5, 6]);
    assert.ok(got.messages[3].replayed);
    assert.deepEqual(c.positions()["u.alice"].seq, 6);
    assert.ok(got.states.some((s) => s.state === "disconnected" && s.code === 1006));
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a client survives a broker restart and gets every durable send once", async () => {
  const stack = await new Stack().start();
  const { c, got } = clientOf(stack, "alice");
  try {
    c.connect();
    assert.ok(await connected(c));
    await stack.cli("send", "user:alice", "before", "--stream", "u.alice");
    assert.ok(await waitFor(() => got.messages.length === 1));
    await stack.killBroker();
    await stack.startBroker();  // same port, same log
    // The gateway's client restores its lease and routes by itself.
    assert.ok(await waitFor(async () => (await stack.cli("send", "user:alice", "after", "--stream", "u.alice")).code === 0, 20_000));
    assert.ok(await waitFor(() => got.messages.some((m) => m.data === "after")));
    await sleep(300);
    // Every record of u.alice is alice's (the tries made while her route was
    // being restored too): all of them, once each, in order.
    const info = JSON.parse((await stack.cli("streams", "info", "u.alice", "--json")).out);
    assert.deepEqual(got.messages.map((m) => m.seq), Array.from({ length: info.last_seq }, (_, i) => i + 1));
    assert.equal(got.messages[0].data, "before");
  } finally {
    c.close();
    await stack.stop();
  }
});

test("an expired token is refreshed from the provider and the client reconnects at once", async () => {
  const stack = await new Stack().start();
  const now = Math.floor(Date.now() / 1000);
  // The first token is already expired; the second is good.
  const { c, got } = clientOf(stack, "alice", {
    token: (n) => token("alice", { exp: n === 1 ? now - 60 : now + 3600 }),
  });
  try {
    c.connect();
    assert.ok(await connected(c));
    assert.equal(got.tokens, 2);
    const expired = got.states.find((s) => s.state === "disconnected");
    assert.equal(expired.code, 4002);
    assert.equal(expired.delayMs, 0);
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a token refused twice closes the client for good", async () => {
  const stack = await new Stack().start();
  const { c, got } = clientOf(stack, "alice", { token: () => "not.a.token" });
  try {
    c.connect();
    assert.ok(await waitFor(() => c.state === "closed"));
    assert.equal(got.tokens, 2);
    assert.equal(got.states.at(-1).code, 4001);
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a client subscribes to allowed channels, again after a reconnect", async () => {
  const stack = await new Stack().start();
  const { c, got } = clientOf(stack, "alice", { token: () => token("alice", { channels: ["news", "sport.*"] }) });
  try {
    c.connect();
    assert.ok(await connected(c));
    await c.subscribe("news");
    await assert.rejects(c.subscribe("secret"), (e) => e.code === "forbidden");
    assert.equal((await stack.cli("pub", "news", "headline", "--confirm")).code, 0);
    assert.ok(await waitFor(() => got.publications.length === 1));
    assert.deepEqual(got.publications[0], { channel: "news", data: "headline" });
    await stack.killGateway();
    await stack.startGateway();
    assert.ok(await waitFor(() => got.states.filter((s) => s.state === "connected").length === 2));
    // The subscription is restored with the connection.
    assert.ok(await waitFor(async () => {
      await stack.cli("pub", "news", "again", "--confirm");
      return got.publications.some((p) => p.data === "again");
    }));
  } finally {
    c.close();
    await stack.stop();
  }
});

test("an offer acked by the client is the sender's acked receipt", async () => {
  const stack = await new Stack().start();
  const { c, got } = clientOf(stack, "alice");
  c.on("offer", (o) => c.ack(o.offer));
  try {
    c.connect();
    assert.ok(await connected(c));
    const r = await stack.cli("send", "user:alice", "ride 9", "--offer", "9", "--expires-ms", "10000", "--receipt-ms",
      "5000", "--json");
    assert.equal(r.code, 0, r.out);
    const answer = JSON.parse(r.out);
    assert.equal(answer.receipt.outcome, "acked");
    assert.equal(got.offers[0].offer, "9");
    assert.equal(got.offers[0].data, "ride 9");
    assert.ok(got.offers[0].ttlMs > 0);
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a gateway that goes silent is declared dead and the client reconnects when it is back", async () => {
  const stack = await new Stack(["--ping-interval-ms", "200", "--dead-after-ms", "1000"]).start();
  const { c, got } = clientOf(stack, "alice", { client: { connectTimeoutMs: 1000 } });
  try {
    c.connect();
    assert.ok(await connected(c));
    stack.gateway.kill("SIGSTOP");
    assert.ok(await waitFor(() => got.states.some((s) => s.code === 4008), 5000));
    stack.gateway.kill("SIGCONT");
    assert.ok(await waitFor(() => got.states.filter((s) => s.state === "connected").length === 2, 10_000));
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a drained gateway sends the client away with a hint it honours", async () => {
  const stack = await new Stack(["--drain-window-ms", "100", "--drain-jitter-ms", "300"]).start();
  const { c, got } = clientOf(stack, "alice");
  try {
    c.connect();
    assert.ok(await connected(c));
    stack.gateway.kill("SIGUSR2");
    assert.ok(await waitFor(() => got.states.some((s) => s.code === 1001)));
    const away = got.states.find((s) => s.code === 1001);
    assert.match(away.reason, /^going_away: retry_after_ms=\d+$/);
    assert.ok(away.delayMs >= Number(/\d+$/.exec(away.reason)[0]));
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a client started before its gateway retries with backoff and connects once it is up", async () => {
  const stack = new Stack();
  await stack.startBroker();
  // A free port for the gateway-to-be: taken by a gateway, then released.
  await stack.startGateway();
  await stack.killGateway();
  const { c, got } = clientOf(stack, "alice");
  try {
    c.connect();
    assert.ok(await waitFor(() => got.states.filter((s) => s.state === "disconnected").length >= 3));
    assert.ok(got.states.filter((s) => s.state === "disconnected").every((s) => s.code === 1006));
    await stack.startGateway();
    assert.ok(await connected(c));
  } finally {
    c.close();
    await stack.stop();
  }
});

test("a client connects over wss:// to a gateway with a certificate, trusting its CA", async () => {
  const stack = await new Stack().withTls().start();
  assert.ok(stack.url.startsWith("wss://"));
  const child = spawn(process.execPath, ["--experimental-websocket", "test/wss-device.mjs", stack.url, token("alice"),
    "1"], { cwd: root, env: { ...process.env, NODE_EXTRA_CA_CERTS: stack.certs.ca }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const exited = new Promise((r) => child.once("exit", r));
  try {
    assert.ok(await waitFor(() => out.includes("connected\n")), out);
    const sent = await stack.cli("send", "user:alice", "over wss");
    assert.equal(sent.code, 0, sent.out);
    assert.equal(await exited, 0, out);
    assert.equal(out, "connected\nover wss\n");
  } finally {
    child.kill();
    await stack.stop();
  }
});

test("a client that does not trust the gateway's certificate does not connect", async () => {
  const stack = await new Stack().withTls().start();
  const { c, got } = clientOf(stack, "alice");
  try {
    c.connect();
    assert.ok(await waitFor(() => got.states.filter((s) => s.state === "disconnected").length >= 2));
    assert.ok(got.states.every((s) => s.state !== "connected"));
    assert.equal(got.messages.length, 0);
  } finally {
    c.close();
    await stack.stop();
  }
});
