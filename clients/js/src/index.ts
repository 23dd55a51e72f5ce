// The JavaScript client of switchyard-gateway: one WebSocket to a gateway,
// kept up across drops (capped exponential backoff with full jitter, the
// gateway's hint as a floor), resumed where it left off (per-stream
// positions), watched by heartbeats. No runtime dependencies: it runs in
// browsers and in Node.js (20: pass `WebSocket` or start Node with
// --experimental-websocket; 22 has it built in).
//
// The protocol is docs/websocket.md of the Switchyard repository.

/**
 * A resume point: the last message received on a durable stream. The epoch
 * is a 64-bit number, so a decimal string (JavaScript numbers hold 53 bits).
 */
export interface Position {
  seq: number;
  epoch: string;
}

/** A message sent to this client's user. */
export interface Message {
  /** The payload as text (when it was UTF-8). */
  data?: string;
  /** The payload's bytes, when it was not UTF-8. */
  bytes?: Uint8Array;
  /** A durable send's place in the broker's log. */
  stream?: string;
  seq?: number;
  epoch?: string;
  /** Read back from the log on a resume. */
  replayed: boolean;
  /** Time left before it goes stale (ms), if it expires. */
  ttlMs?: number;
}

/** An offer: ack it (client.ack) once the user saw it. */
export interface Offer extends Message {
  /** The offer's id (a 64-bit number as a decimal string). */
  offer: string;
}

export interface Publication {
  channel: string;
  data?: string;
  bytes?: Uint8Array;
}

export interface Trimmed {
  stream: string;
  reason: "trimmed" | "epoch_changed" | "stream_gone" | "limit";
  firstSeq: number;
  epoch: string;
}

export type State = "connecting" | "connected" | "disconnected" | "closed";

export interface StateChange {
  state: State;
  /** The close code that ended the last connection (1006: it vanished). */
  code?: number;
  /** The gateway's close reason, or what went wrong. */
  reason?: string;
  /** Before the next attempt (disconnected). */
  delayMs?: number;
  /** Attempts since the last stable connection. */
  attempt?: number;
}

export interface Welcome {
  user: string;
  session: string;
  pingMs: number;
  deadMs: number;
  caps: string[];
  flags: Record<string, boolean>;
}

export interface Backoff {
  /** First delay's ceiling (ms). Default 500. */
  baseMs?: number;
  /** Cap of the ceiling (ms). Default 30000. */
  maxMs?: number;
  /** A connection up this long resets the attempt count (ms). Default 30000. */
  stableAfterMs?: number;
}

/** Minimal shape of the WebSocket class (browser's, Node's, or the `ws` package's). */
export interface WebSocketLike {
  readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}
export type WebSocketFactory = new (url: string) => WebSocketLike;

export interface ClientOptions {
  /** Gateway URLs (ws://host:port/ws), tried in turn. */
  url: string | string[];
  /** Called before every connection attempt: the token to present (JWT). */
  token: () => string | Promise<string>;
  /** "web/1.4.2": the gateway logs it. */
  app?: string;
  /** Capabilities to declare. Default ["offers"]. */
  caps?: string[];
  /** Positions to resume from (e.g. saved by an earlier page). */
  positions?: Record<string, Position>;
  backoff?: Backoff;
  /** The WebSocket class; default globalThis.WebSocket. */
  WebSocket?: WebSocketFactory;
  /** Randomness in [0, 1) for the jitter (tests pass a seeded one). */
  random?: () => number;
  /** From opening the socket to the welcome (ms); then the attempt counts as failed. Default 10000. */
  connectTimeoutMs?: number;
}

type Events = {
  message: (m: Message) => void;
  offer: (o: Offer) => void;
  withdrawn: (offer: string) => void;
  publication: (p: Publication) => void;
  trimmed: (t: Trimmed) => void;
  dropped: (count: number) => void;
  welcome: (w: Welcome) => void;
  state: (s: StateChange) => void;
  error: (e: { code: string; message: string; id?: number }) => void;
};

/** Close codes after which a reconnect as is cannot succeed. */
const fatalCodes = new Set([4000, 4005, 1009]);
const unauthorized = 4001;
const tokenExpired = 4002;
const goingAway = 1001;

/**
 * The delay before reconnect attempt `attempt` (0-based since the last
 * stable connection): uniform in [0, min(max, base * 2^attempt)] ("full
 * jitter"), never below the gateway's hint.
 */
export function reconnectDelay(attempt: number, backoff: Required<Backoff>, random: () => number, hintMs = 0): number {
  const ceiling = Math.min(backoff.maxMs, backoff.baseMs * Math.pow(2, Math.min(attempt, 30)));
  return Math.max(hintMs, Math.floor(random() * ceiling));
}

/** The retry hint of a close reason ("going_away: retry_after_ms=250"), or 0. */
export function retryHint(reason: string): number {
  const m = /retry_after_ms=(\d+)/.exec(reason);
  return m ? Number(m[1]) : 0;
}

function decodeBase64(b64: string): Uint8Array {
  const text = atob(b64);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; ++i) out[i] = text.charCodeAt(i);
  return out;
}

export class SwitchyardClient {
  private readonly urls: string[];
  private readonly opts: ClientOptions;
  private readonly backoff: Required<Backoff>;
  private readonly random: () => number;
  private readonly WS: WebSocketFactory;
  private readonly listeners: { [K in keyof Events]?: Events[K][] } = {};
  private readonly streamPositions = new Map<string, Position>();
  private readonly channels = new Set<string>();
  private readonly pending = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  private ws: WebSocketLike | null = null;
  private urlIndex = 0;
  private attempt = 0;
  private currentState: State = "disconnected";
  private stopped = true;
  private welcomed = false;
  private nextId = 1;
  private pingMs = 25_000;
  private deadMs = 60_000;
  private lastReceived = 0;
  private lastSent = 0;
  private connectedAt = 0;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;  // the next attempt
  private connectTimer: ReturnType<typeof setTimeout> | null = null;  // this attempt's welcome deadline
  private beatTimer: ReturnType<typeof setInterval> | null = null;
  private tokenRetried = false;

  constructor(options: ClientOptions) {
    this.opts = options;
    this.urls = Array.isArray(options.url) ? options.url : [options.url];
    if (this.urls.length === 0) throw new Error("switchyard: no gateway url");
    this.backoff = {
      baseMs: options.backoff?.baseMs ?? 500,
      maxMs: options.backoff?.maxMs ?? 30_000,
      stableAfterMs: options.backoff?.stableAfterMs ?? 30_000,
    };
    this.random = options.random ?? Math.random;
    const ws = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketFactory }).WebSocket;
    if (!ws) throw new Error("switchyard: no WebSocket class (Node 20: pass options.WebSocket or --experimental-websocket)");
    this.WS = ws;
    for (const [stream, p] of Object.entries(options.positions ?? {})) this.streamPositions.set(stream, { ...p });
  }

  get state(): State {
    return this.currentState;
  }

  /** Per durable stream, the last message received: keep them to resume after a restart. */
  positions(): Record<string, Position> {
    return Object.fromEntries([...this.streamPositions].map(([k, v]) => [k, { ...v }]));
  }

  on<K extends keyof Events>(event: K, fn: Events[K]): () => void {
    const list = (this.listeners[event] ??= []) as Events[K][];
    list.push(fn);
    return () => {
      const i = list.indexOf(fn);
      if (i >= 0) list.splice(i, 1);
    };
  }

  /** Starts connecting (and reconnecting) until close(). */
  connect(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.attempt = 0;
    globalThis.addEventListener?.("online", this.onOnline);
    void this.open();
  }

  // The network is back (a browser's "online" event): waiting for a retry
  // is pointless, go now with a fresh count.
  private readonly onOnline = (): void => {
    if (this.stopped || !this.retryTimer) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.attempt = 0;
    void this.open();
  };

  /** Closes for good (no reconnect). */
  close(): void {
    this.stopped = true;
    globalThis.removeEventListener?.("online", this.onOnline);
    this.clearTimers();
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onclose = null;
      ws.close(1000, "client closed");
    }
    this.failPending(new Error("closed"));
    this.setState({ state: "closed" });
  }

  /** Subscribes to a channel the token allows; resolves once the gateway holds it. Kept across reconnects. */
  subscribe(channel: string): Promise<void> {
    this.channels.add(channel);
    if (!this.welcomed) return Promise.resolve();  // sent at the next welcome
    return this.request({ t: "sub", channel }).catch((e: Error) => {
      this.channels.delete(channel);
      throw e;
    });
  }

  unsubscribe(channel: string): Promise<void> {
    this.channels.delete(channel);
    if (!this.welcomed) return Promise.resolve();
    return this.request({ t: "unsub", channel });
  }

  /** The user took the offer: the sender's receipt says acked. */
  ack(offer: string): void {
    this.sendJson({ t: "ack", offer });
  }

  // ------------------------------------------------------------ internals

  private emit<K extends keyof Events>(event: K, ...args: Parameters<Events[K]>): void {
    for (const fn of this.listeners[event] ?? []) (fn as (...a: Parameters<Events[K]>) => void)(...args);
  }

  private setState(s: StateChange): void {
    this.currentState = s.state;
    this.emit("state", s);
  }

  private request(body: Record<string, unknown>): Promise<void> {
    const id = this.nextId++;
    return new Promise<void>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.sendJson({ ...body, id });
    });
  }

  private failPending(e: Error): void {
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }

  private sendJson(body: Record<string, unknown>): void {
    if (!this.ws || this.ws.readyState !== 1) return;
    this.ws.send(JSON.stringify(body));
    this.lastSent = Date.now();
  }

  private clearTimers(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.connectTimer) clearTimeout(this.connectTimer);
    if (this.beatTimer) clearInterval(this.beatTimer);
    this.retryTimer = null;
    this.connectTimer = null;
    this.beatTimer = null;
  }

  private async open(): Promise<void> {
    if (this.stopped) return;
    this.setState({ state: "connecting", attempt: this.attempt });
    let token: string;
    try {
      token = await this.opts.token();
    } catch (e) {
      return this.retry(1006, `token provider failed: ${String(e)}`);
    }
    if (this.stopped) return;
    const url = this.urls[this.urlIndex % this.urls.length];
    let ws: WebSocketLike;
    try {
      ws = new this.WS(url);
    } catch (e) {
      return this.retry(1006, String(e));
    }
    this.ws = ws;
    this.welcomed = false;
    // A gateway that accepts but never welcomes (stopped, overloaded) must
    // not hold the client: the attempt fails after connectTimeoutMs.
    this.connectTimer = setTimeout(() => {
      this.connectTimer = null;
      if (this.ws !== ws || this.welcomed) return;
      this.ws = null;
      ws.onclose = null;
      ws.close();
      this.retry(1006, "no welcome in time");
    }, this.opts.connectTimeoutMs ?? 10_000);
    ws.onopen = () => {
      this.lastReceived = Date.now();
      const hello: Record<string, unknown> = { t: "hello", token, caps: this.opts.caps ?? ["offers"] };
      if (this.opts.app) hello.app = this.opts.app;
      if (this.streamPositions.size > 0) hello.resume = this.positions();
      this.sendJson(hello);
    };
    ws.onmessage = (ev) => this.received(String(ev.data));
    // A connection that fails or breaks fires "error": in browsers "close"
    // (1006) follows, Node 20's WebSocket fires no "close" for a connection
    // that could not be made. Either way this attempt is over.
    ws.onerror = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      ws.onclose = null;
      ws.close();
      this.retry(1006, "connection failed");
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.retry(ev.code, ev.reason);
    };
  }

  private received(text: string): void {
    this.lastReceived = Date.now();
    let m: Record<string, any>;
    try {
      m = JSON.parse(text);
    } catch {
      return;
    }
    switch (m.t) {
      case "welcome":
        return this.welcome(m);
      case "msg":
      case "offer": {
        const msg: Offer = {
          offer: String(m.offer ?? ""),
          replayed: m.replayed === true,
          ...(m.data !== undefined ? { data: m.data } : {}),
          ...(m.b64 !== undefined ? { bytes: decodeBase64(m.b64) } : {}),
          ...(m.ttl_ms !== undefined ? { ttlMs: m.ttl_ms } : {}),
        };
        if (typeof m.stream === "string") {
          const last = this.streamPositions.get(m.stream);
          // Once each: a message at or before the position is a repeat.
          if (last && last.epoch === String(m.epoch) && m.seq <= last.seq) return;
          this.streamPositions.set(m.stream, { seq: m.seq, epoch: String(m.epoch) });
          msg.stream = m.stream;
          msg.seq = m.seq;
          msg.epoch = String(m.epoch);
        }
        if (m.t === "offer") return this.emit("offer", msg);
        const plain: Message = { ...msg };
        delete (plain as Partial<Offer>).offer;
        return this.emit("message", plain);
      }
      case "withdrawn":
        return this.emit("withdrawn", String(m.offer));
      case "pub":
        return this.emit("publication", {
          channel: m.channel,
          ...(m.data !== undefined ? { data: m.data } : {}),
          ...(m.b64 !== undefined ? { bytes: decodeBase64(m.b64) } : {}),
        });
      case "trimmed":
        // Whatever follows starts a new count for the stream.
        this.streamPositions.delete(m.stream);
        return this.emit("trimmed", { stream: m.stream, reason: m.reason, firstSeq: m.first_seq, epoch: String(m.epoch) });
      case "dropped":
        return this.emit("dropped", m.count);
      case "ok":
      case "error": {
        const p = m.id ? this.pending.get(m.id) : undefined;
        if (p) {
          this.pending.delete(m.id);
          if (m.t === "ok") p.resolve();
          else p.reject(Object.assign(new Error(m.message), { code: m.code }));
        } else if (m.t === "error") {
          this.emit("error", { code: m.code, message: m.message, ...(m.id ? { id: m.id } : {}) });
        }
        return;
      }
      default:
        return;  // "hb", and kinds this version does not know
    }
  }

  private welcome(m: Record<string, any>): void {
    if (this.connectTimer) clearTimeout(this.connectTimer);
    this.connectTimer = null;
    this.welcomed = true;
    this.tokenRetried = false;
    this.connectedAt = Date.now();
    this.pingMs = m.ping_ms || 25_000;
    this.deadMs = m.dead_ms || 2 * this.pingMs + 10_000;
    this.setState({ state: "connected" });
    this.emit("welcome", {
      user: m.user,
      session: m.session,
      pingMs: this.pingMs,
      deadMs: this.deadMs,
      caps: m.caps ?? [],
      flags: m.flags ?? {},
    });
    for (const channel of this.channels)
      this.request({ t: "sub", channel }).catch((e: Error) => this.emit("error", { code: "subscribe", message: e.message }));
    // Heartbeats: an "hb" after a quiet interval (a browser cannot send
    // WebSocket pings, nor see the gateway's); nothing received for dead_ms:
    // the connection is dead.
    const tick = Math.max(100, Math.min(this.pingMs, this.deadMs) / 4);
    this.beatTimer = setInterval(() => {
      const now = Date.now();
      if (now - this.lastReceived >= this.deadMs) {
        const ws = this.ws;
        this.ws = null;
        if (ws) {
          ws.onclose = null;
          ws.close(4008, "heartbeat_timeout");
        }
        return this.retry(4008, "heartbeat_timeout: nothing from the gateway");
      }
      if (now - this.lastSent >= this.pingMs) this.sendJson({ t: "hb" });
    }, tick);
  }

  private retry(code: number, reason: string): void {
    this.clearTimers();
    this.welcomed = false;
    this.failPending(new Error(`disconnected (${code})`));
    if (this.stopped) return;
    if (fatalCodes.has(code) || (code === unauthorized && this.tokenRetried)) {
      this.stopped = true;
      this.setState({ state: "closed", code, reason });
      return;
    }
    // Reset only after a stable connection: a gateway that accepts and
    // drops at once must not turn the backoff into a tight loop.
    if (this.connectedAt && Date.now() - this.connectedAt >= this.backoff.stableAfterMs) this.attempt = 0;
    this.connectedAt = 0;
    let delay: number;
    if (code === tokenExpired || code === unauthorized) {
      this.tokenRetried = code === unauthorized;
      delay = 0;  // a fresh token, at once
    } else {
      delay = reconnectDelay(this.attempt, this.backoff, this.random, retryHint(reason));
      ++this.attempt;
      if (code === goingAway || this.attempt > 1) ++this.urlIndex;  // another gateway, if there are several
    }
    this.setState({ state: "disconnected", code, reason, delayMs: delay, attempt: this.attempt });
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.open();
    }, delay);
  }
}
