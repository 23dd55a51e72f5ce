// A device in a process of its own, for the wss:// test: Node reads the
// CAs it trusts (NODE_EXTRA_CA_CERTS) only at start. Connects to argv[2]
// with the token argv[3], prints "connected", then each message's data,
// one per line; exits after `argv[4]` messages or 20 s.
import { SwitchyardClient } from "../dist/index.js";

const [url, token, count] = process.argv.slice(2);
let left = Number(count);
const c = new SwitchyardClient({ url, token: () => token });
c.on("state", (s) => s.state === "connected" && console.log("connected"));
c.on("message", (m) => {
  console.log(m.data);
  if (--left === 0) {
    c.close();
    process.exit(0);
  }
});
c.connect();
setTimeout(() => process.exit(3), 20_000).unref();
