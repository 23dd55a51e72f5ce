// End to end in headless Chromium (Debian's /usr/bin/chromium, driven by
// puppeteer-core): the demo page connects to a real switchyard-gateway with
// a token, receives sends to its user, survives a gateway kill and a broker
// restart with nothing lost or repeated (resume), and acks an offer by its
// button, which the dispatcher (switchyard-cli) sees as its receipt. Then
// the same page over wss://, the gateway's certificate trusted by its key.
// SWITCHYARD_UPDATE_DOCS=1 keeps the page's screenshot in docs/img/.

import { test } from "node:test";
import assert from "node:assert/strict";
import { X509Certificate, createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import puppeteer from "puppeteer-core";

import { startDemoServer } from "../demo/serve.mjs";
import { Stack, sleep, token, waitFor } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const docsImg = join(root, "..", "..", "docs", "img", "websocket-demo.png");

/** Headless Chromium with its profile in `profile`. */
function launch(profile, args = []) {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    userDataDir: profile,
    // This machine has no network beyond loopback: no background traffic.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", ...args],
  });
}

/** The base64 SHA-256 of a certificate's public key, as Chromium's --ignore-certificate-errors-spki-list takes it. */
function spkiHash(certFile) {
  const spki = new X509Certificate(readFileSync(certFile)).publicKey.export({ type: "spki", format: "der" });
  return createHash("sha256").update(spki).digest("base64");
}

test("the demo page in Chromium receives, resumes through a gateway kill and a broker restart, and acks an offer",
  { timeout: 120_000 }, async () => {
    const stack = await new Stack().start();
    const http = await startDemoServer();
    const profile = await mkdtemp(join(tmpdir(), "switchyard-chromium-"));
    const browser = await launch(profile);
    try {
      const page = await browser.newPage();
      await page.setViewport({ width: 900, height: 700 });
      const pageUrl = `http://127.0.0.1:${http.address().port}/?url=${encodeURIComponent(stack.url)}&token=${token("alice")}`;
      await page.goto(pageUrl);
      const seen = () => page.evaluate(() => window.demo);
      const messages = async () => (await seen()).messages;
      assert.ok(await waitFor(async () => (await page.$eval("#state", (e) => e.textContent)) === "connected"));

      const send = async (text) => stack.cli("send", "user:alice", text, "--stream", "u.alice");
      for (const text of ["order placed", "driver assigned"]) assert.equal((await send(text)).code, 0);
      assert.ok(await waitFor(async () => (await messages()).length === 2));

      // kill -9 of the gateway; sent meanwhile: kept in the log only.
      await stack.killGateway();
      assert.ok(await waitFor(async () => (await page.$eval("#state", (e) => e.textContent)) !== "connected"));
      await send("driver arriving");
      await stack.startGateway();
      assert.ok(await waitFor(async () => (await messages()).length === 3, 20_000));

      // The broker restarts under the gateway (same port, same log).
      await stack.killBroker();
      await stack.startBroker();
      assert.ok(await waitFor(async () => (await send("driver here")).code === 0, 20_000));
      assert.ok(await waitFor(async () => (await messages()).some((m) => m.data === "driver here"), 20_000));
      await sleep(300);
      const got = await messages();
      // Every record of u.alice is alice's (the tries made while her route
      // was being restored too): all of them, once each, in order.
      const info = JSON.parse((await stack.cli("streams", "info", "u.alice", "--json")).out);
      assert.deepEqual(got.map((m) => m.seq), Array.from({ length: info.last_seq }, (_, i) => i + 1));
      assert.deepEqual(got.slice(0, 3).map((m) => m.data), ["order placed", "driver assigned", "driver arriving"]);
      assert.ok(got[2].replayed, "the message sent while the gateway was down came from the log");

      // An offer: the dispatcher waits for its receipt while the test
      // clicks Accept on the page.
      const dispatch = stack.cli("send", "user:alice", "ride to the airport, 23 EUR", "--offer", "7", "--expires-ms",
        "30000", "--receipt-ms", "20000", "--json");
      await page.waitForSelector("#offer-7 button", { timeout: 20_000 });
      await page.click("#offer-7 button");
      const receipt = await dispatch;
      assert.equal(receipt.code, 0, receipt.out);
      assert.equal(JSON.parse(receipt.out).receipt.outcome, "acked");
      assert.deepEqual((await seen()).acked, ["7"]);

      const shot = process.env.SWITCHYARD_UPDATE_DOCS ? docsImg : join(profile, "demo.png");
      await page.screenshot({ path: shot });
    } finally {
      await browser.close();
      http.close();
      await stack.stop();
      await rm(profile, { recursive: true, force: true });
    }
  });

test("the demo page in Chromium connects over wss:// and receives a send", { timeout: 60_000 }, async () => {
  const stack = await new Stack().withTls().start();
  const http = await startDemoServer();
  const profile = await mkdtemp(join(tmpdir(), "switchyard-chromium-"));
  // The test CA is not the system's: Chromium is told to trust this one key.
  const browser = await launch(profile, [`--ignore-certificate-errors-spki-list=${spkiHash(stack.certs.cert)}`]);
  try {
    const page = await browser.newPage();
    assert.ok(stack.url.startsWith("wss://"));
    await page.goto(`http://127.0.0.1:${http.address().port}/?url=${encodeURIComponent(stack.url)}&token=${token("bob")}`);
    assert.ok(await waitFor(async () => (await page.$eval("#state", (e) => e.textContent)) === "connected"));
    assert.equal((await stack.cli("send", "user:bob", "over wss")).code, 0);
    assert.ok(await waitFor(async () => (await page.evaluate(() => window.demo)).messages.length === 1));
    assert.equal((await page.evaluate(() => window.demo)).messages[0].data, "over wss");
  } finally {
    await browser.close();
    http.close();
    await stack.stop();
    await rm(profile, { recursive: true, force: true });
  }
});
