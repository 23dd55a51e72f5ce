// Real processes for the JavaScript client's tests: switchyard-server (with
// its log in a temporary folder), switchyard-gateway on it, and
// switchyard-cli as the service that sends, publishes and offers. Binaries
// from SWITCHYARD_SERVER, SWITCHYARD_GATEWAY, SWITCHYARD_CLI (ctest sets
// them), else the default build folder.

import { spawn, execFile, execFileSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const build = join(here, "..", "..", "..", "build", "test-plain");
export const bin = {
  server: process.env.SWITCHYARD_SERVER ?? join(build, "broker", "switchyard-server"),
  gateway: process.env.SWITCHYARD_GATEWAY ?? join(build, "gateway", "switchyard-gateway"),
  cli: process.env.SWITCHYARD_CLI ?? join(build, "admin", "switchyard-cli"),
};

export const secret = "js-client-test-secret";

const b64url = (s) => Buffer.from(s).toString("base64url");

/** An HS256 token for `sub` (extra claims merged in). */
export function token(sub, extra = {}) {
  const input = `${b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${b64url(JSON.stringify({ sub, ...extra }))}`;
  return `${input}.${createHmac("sha256", secret).update(input).digest("base64url")}`;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `pred` every 20 ms until true or `ms` passed; returns its last value. */
export async function waitFor(pred, ms = 10_000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return true;
    await sleep(20);
  }
  return pred();
}

async function readPort(file, child, what) {
  const end = Date.now() + 15_000;
  while (Date.now() < end) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}`);
    if (existsSync(file)) {
      const text = readFileSync(file, "utf8").trim();
      if (text) return Number(text);
    }
    await sleep(20);
  }
  throw new Error(`${what} did not write its port`);
}

/**
 * A CA and a certificate it signed for 127.0.0.1 (EC P-256, the openssl
 * command line tool), in `dir`: { ca, cert, key } paths.
 */
export function makeCerts(dir) {
  const p = (f) => join(dir, f);
  const openssl = (...args) => execFileSync("openssl", args, { stdio: "ignore" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  openssl("req", "-x509", ...ec, "-days", "2", "-subj", "/CN=test-ca", "-keyout", p("ca.key"), "-out", p("ca.pem"));
  writeFileSync(p("gateway.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  openssl("req", ...ec, "-subj", "/CN=gateway", "-keyout", p("gateway.key"), "-out", p("gateway.csr"));
  openssl("x509", "-req", "-days", "2", "-set_serial", "7", "-in", p("gateway.csr"), "-CA", p("ca.pem"), "-CAkey",
    p("ca.key"), "-extfile", p("gateway.ext"), "-out", p("gateway.pem"));
  return { ca: p("ca.pem"), cert: p("gateway.pem"), key: p("gateway.key") };
}

/** A broker, a gateway on it, and the CLI; stop() ends them. */
export class Stack {
  constructor(gatewayArgs = []) {
    this.dir = mkdtempSync(join(tmpdir(), "switchyard-js-"));
    this.gatewayArgs = gatewayArgs;
    this.brokerPort = 0;
    this.gatewayPort = 0;
    writeFileSync(join(this.dir, "secret"), secret + "\n");
  }

  /** The gateway serves wss:// with a certificate of a new CA (this.certs.ca). Before start(). */
  withTls() {
    this.certs = makeCerts(this.dir);
    this.gatewayArgs = [...this.gatewayArgs, "--tls-cert", this.certs.cert, "--tls-key", this.certs.key];
    return this;
  }

  async start() {
    await this.startBroker();
    await this.startGateway();
    return this;
  }

  async startBroker() {
    const portFile = join(this.dir, "broker.port");
    rmSync(portFile, { force: true });
    this.broker = spawn(bin.server, ["--listen", `127.0.0.1:${this.brokerPort}`, "--data-dir", join(this.dir, "data"),
      "--durability", "none", "--port-file", portFile, "--log-level", "warn"], { stdio: ["ignore", "ignore", "inherit"] });
    this.brokerPort = await readPort(portFile, this.broker, "switchyard-server");
  }

  async startGateway(extra = []) {
    const portFile = join(this.dir, "gateway.port");
    rmSync(portFile, { force: true });
    this.gateway = spawn(bin.gateway, ["--listen", `127.0.0.1:${this.gatewayPort}`, "--broker",
      `127.0.0.1:${this.brokerPort}`, "--jwt-secret-file", join(this.dir, "secret"), "--inbox-id", "gw-js",
      "--lease-ttl-ms", "2000", "--port-file", portFile, "--log-level", "warn", ...this.gatewayArgs, ...extra],
      { stdio: ["ignore", "ignore", "inherit"] });
    this.gatewayPort = await readPort(portFile, this.gateway, "switchyard-gateway");
  }

  get url() {
    return `${this.certs ? "wss" : "ws"}://127.0.0.1:${this.gatewayPort}/ws`;
  }

  /** Ends a process: `signal` and waits for its exit. */
  static async end(child, signal = "SIGKILL") {
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once("exit", r));
    child.kill(signal);
    await gone;
  }

  async killGateway(signal = "SIGKILL") {
    await Stack.end(this.gateway, signal);
  }
  async killBroker(signal = "SIGKILL") {
    await Stack.end(this.broker, signal);
  }

  /** Runs switchyard-cli against the broker; resolves {code, out}. */
  cli(...args) {
    return new Promise((resolve) => {
      execFile(bin.cli, ["--address", `127.0.0.1:${this.brokerPort}`, ...args], (err, stdout, stderr) =>
        resolve({ code: err ? err.code : 0, out: stdout + stderr }));
    });
  }

  async stop() {
    await this.killGateway();
    await this.killBroker();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
