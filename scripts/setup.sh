#!/usr/bin/env bash
# Installs the Debian 12 packages Switchyard builds and tests with (and,
# with --js, the JavaScript client's Node.js packages: see the end).
# Idempotent: installs only what is missing, so a second run is a no-op.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libboost-dev flatbuffers-compiler libflatbuffers-dev
      liblmdb-dev libxxhash-dev catch2 libspdlog-dev libfmt-dev
      libcli11-dev libtomlplusplus-dev libssl-dev openssl libsodium-dev
      dpkg-dev file                 # cpack -G DEB: dpkg-shlibdeps finds the .deb's library dependencies
      clang-14 libclang-rt-14-dev   # the fuzz targets (libFuzzer, ASan, UBSan runtimes)
      clang-format-14               # tests/style/check_format.sh: the tree stays formatted
      gnuplot-nox jq                # bench/plot-*.sh and their test
      nlohmann-json3-dev etcd-server  # cluster/: etcd_client's JSON; a real etcd for its tests
      libnats-dev nats-server       # cluster/nats_link (cnats), its tests and bench against a real NATS server
      libjwt-dev                    # gateway/: HS*, RS*, ES* tokens (EdDSA by libsodium)
      prometheus chromium)          # tests of the monitoring port: promtool, a headless browser
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# With --js (scripts/run-tests.sh, scripts/run-demo.sh): the JavaScript
# client (clients/js) too. The broker alone does not need it.
[[ ${1:-} == --js ]] || exit 0
# The JavaScript client (clients/js): Node.js 20 or later (on this machine
# image; Debian 12's own nodejs is 18, too old for its WebSocket), and its
# development packages from the npm registry, pinned by package-lock.json
# (TypeScript, puppeteer-core: no browser download, Debian's chromium is
# used). Installed again only when the lock file changed.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v node >/dev/null || (( $(node -p 'process.versions.node.split(".")[0]') < 20 )); then
  echo "setup: Node.js 20 or later is needed for clients/js (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi
js=$root/clients/js
if [[ ! -f $js/node_modules/.package-lock.json || $js/package-lock.json -nt $js/node_modules/.package-lock.json ]]; then
  echo "setup: npm ci in clients/js" >&2
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
