#!/usr/bin/env bash
# Installs the build dependencies (idempotent), builds switchyard-server
# (Release, with the bench and examples) and runs it in the foreground on its defaults: 127.0.0.1:7878,
# data folder ./switchyard-data. Ctrl-C stops it cleanly.
# Arguments go to the server, e.g. `scripts/run-broker.sh --log-level debug`.
set -euo pipefail
here=$(pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/setup.sh"
cmake -S "$repo" -B "$repo/build/release" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$repo/build/release" -j2
cd "$here"
exec "$repo/build/release/broker/switchyard-server" "$@"
