#!/usr/bin/env bash
# The WebSocket gateway and its demo page, for a first try: start the broker
# first (scripts/run-broker.sh, 127.0.0.1:7878), then this. It builds as
# run-broker.sh does, makes a demo HS256 secret in
# ./switchyard-data/demo-jwt.secret if there is none, starts
# switchyard-gateway on 127.0.0.1:8080 and serves the demo page on
# 127.0.0.1:8081, printing the page's address with a token for USER_ID
# (default alice). Ctrl-C stops both. Arguments go to the gateway.
set -euo pipefail
here=$(pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/setup.sh" --js
cmake -S "$repo" -B "$repo/build/release" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$repo/build/release" -j2 --target switchyard-gateway switchyard-cli
(cd "$repo/clients/js" && node node_modules/typescript/bin/tsc -p tsconfig.json)
cd "$here"
secret=switchyard-data/demo-jwt.secret
if [[ ! -s $secret ]]; then
  mkdir -p switchyard-data
  (umask 077 && head -c 32 /dev/urandom | base64 > "$secret")
fi
"$repo/build/release/gateway/switchyard-gateway" --broker 127.0.0.1:7878 --listen 127.0.0.1:8080 \
  --jwt-secret-file "$secret" --inbox-id gw-demo "$@" &
gateway=$!
trap 'kill $gateway 2>/dev/null' EXIT
node "$repo/clients/js/demo/serve.mjs" --secret "$secret" --user "${USER_ID:-alice}" --port 8081 &
trap 'kill $gateway $! 2>/dev/null' EXIT
sleep 1
echo "send it something: $repo/build/release/admin/switchyard-cli send user:${USER_ID:-alice} 'hello' --stream u.${USER_ID:-alice}"
wait $gateway
