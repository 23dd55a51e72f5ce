#!/usr/bin/env bash
# packaging.install_*: `cmake --install` of a build tree into a temporary
# prefix holds the public headers (and nothing else of the sources), the
# static libraries, the CMake package and switchyard.pc (and, for a full
# build, the three binaries; nothing outside the prefix). A project outside
# the tree (consumer/) then builds the examples with find_package(switchyard)
# + switchyard::client, and send.cpp again with `pkg-config --cflags --libs
# switchyard` only; both programs run against a real switchyard-server on
# 127.0.0.1 port 0. find_package(switchyard 1.0) must fail (SameMajorVersion).
#
#   install_test.sh MODE BUILD_DIR SOURCE_DIR CXX LIBDIR INCLUDEDIR SERVER [EXTRA_FLAGS]
#
# MODE: `full` (a whole build: installs and runs its own switchyard-server)
# or `client-only` (configures and builds SOURCE_DIR with
# -DSWITCHYARD_CLIENT_ONLY=ON in BUILD_DIR first; runs SERVER).
# EXTRA_FLAGS go to the consumers' compile and link (the sanitizers of an
# instrumented build).
set -euo pipefail
mode=$1 build=$2 src=$3 cxx=$4 libdir=$5 includedir=$6 server=$7 extra=${8:-}

work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run_logged() {  # run_logged LOG CMD...: the command's output only if it fails
  local log=$1; shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$* (exit $?)"; }
}

if [[ $mode == client-only ]]; then
  build=$work/client-only-build
  # Unoptimized, without debug information: the quickest build to link.
  run_logged "$work/configure.log" cmake -S "$src" -B "$build" -DSWITCHYARD_CLIENT_ONLY=ON \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_CXX_COMPILER="$cxx"
  # Only the client library's own dependencies were looked for.
  for v in spdlog_DIR CLI11_DIR tomlplusplus_DIR LMDB_FOUND XXHASH_FOUND; do
    ! grep -q "^$v:" "$build/CMakeCache.txt" || fail "a client-only configure looked for $v"
  done
  cmake --build "$build" --target help >"$work/targets"
  grep -q ' switchyard_client$' "$work/targets" || fail "no switchyard_client target in a client-only build"
  for t in switchyard-server switchyard_broker switchyard_storage switchyard_auth switchyard-cli switchyard-bench; do
    ! grep -q " $t\$" "$work/targets" || fail "a client-only build has the target $t"
  done
  run_logged "$work/build.log" cmake --build "$build" -j2
elif [[ $mode != full ]]; then
  fail "unknown mode $mode"
fi

# The install.
prefix=$work/prefix
run_logged "$work/install.log" cmake --install "$build" --prefix "$prefix"
outside=$(grep -v "^$prefix/" "$build/install_manifest.txt" || true)
[[ -z $outside ]] || fail "cmake --install wrote outside the prefix: $outside"
for f in "$libdir/libswitchyard_client.a" "$libdir/libswitchyard_protocol.a" \
         "$libdir/cmake/switchyard/switchyardConfig.cmake" "$libdir/cmake/switchyard/switchyardConfigVersion.cmake" \
         "$libdir/cmake/switchyard/switchyardTargets.cmake" "$libdir/pkgconfig/switchyard.pc"; do
  [[ -f $prefix/$f ]] || fail "not installed: $f"
done
if [[ $mode == full ]]; then
  for b in switchyard-server switchyard-cli switchyard-bench; do
    [[ -x $prefix/bin/$b ]] || fail "not installed: bin/$b"
  done
  server=$prefix/bin/switchyard-server
  "$server" --help >/dev/null || fail "the installed switchyard-server --help"
  "$prefix/bin/switchyard-cli" --help >/dev/null || fail "the installed switchyard-cli --help"
else
  [[ ! -e $prefix/bin ]] || fail "a client-only install has bin/: $(ls "$prefix/bin")"
fi

# The public headers: exactly those of client-lib/include/switchyard, each
# compiling on its own without the libraries' headers (Asio, FlatBuffers,
# OpenSSL, fmt, libsodium): the public API only.
diff <(cd "$src/client-lib/include/switchyard" && ls) <(cd "$prefix/$includedir/switchyard" && ls) ||
  fail "the installed headers differ from client-lib/include/switchyard"
for h in "$prefix/$includedir"/switchyard/*.hpp; do
  echo "#include <switchyard/$(basename "$h")>" |
    "$cxx" -std=c++23 -M -x c++ - -I"$prefix/$includedir" >"$work/deps" || fail "the installed $(basename "$h") does not compile on its own"
  ! grep -E '/(boost|flatbuffers|openssl|fmt|sodium)/|sodium\.h' "$work/deps" ||
    fail "the installed $(basename "$h") includes a dependency's headers"
done

# A broker for the programs to talk to.
"$server" --listen 127.0.0.1:0 --data-dir "" --port-file "$work/port" --log-level warn &
server_pid=$!
for _ in $(seq 200); do [[ -s $work/port ]] && break; sleep 0.05; done
[[ -s $work/port ]] || fail "switchyard-server wrote no port file"
port=$(cat "$work/port")

# find_package(switchyard) + switchyard::client.
consumer_flags=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release
                -DSWITCHYARD_EXAMPLES_DIR="$src/examples" -DCMAKE_CXX_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra")
if cmake -S "$src/tests/packaging/consumer" -B "$work/wrong-major" "${consumer_flags[@]}" \
     -DSWITCHYARD_WANTED_VERSION=1.0 >"$work/wrong-major.log" 2>&1; then
  fail "find_package(switchyard 1.0) accepted version 0.x"
fi
run_logged "$work/consumer-configure.log" cmake -S "$src/tests/packaging/consumer" -B "$work/consumer" "${consumer_flags[@]}"
grep -qx "switchyard_DIR:PATH=$prefix/$libdir/cmake/switchyard" "$work/consumer/CMakeCache.txt" ||
  fail "find_package(switchyard) did not find the temporary prefix: $(grep switchyard_DIR "$work/consumer/CMakeCache.txt")"
# A full build's test builds every example; a client-only one (which has
# compiled the library already) pubsub alone.
targets=()
[[ $mode == full ]] || targets=(--target consumer-pubsub)
run_logged "$work/consumer-build.log" cmake --build "$work/consumer" -j2 "${targets[@]}"
"$work/consumer/consumer-pubsub" --address "127.0.0.1:$port" >"$work/pubsub.out" ||
  { cat "$work/pubsub.out" >&2; fail "the find_package build of examples/pubsub.cpp"; }
grep -q '2 of 2 subscribers received the message' "$work/pubsub.out" || fail "pubsub: $(cat "$work/pubsub.out")"

# pkg-config only.
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
read -ra cflags <<<"$(pkg-config --cflags switchyard)" || fail "pkg-config --cflags switchyard"
read -ra libs <<<"$(pkg-config --libs switchyard)" || fail "pkg-config --libs switchyard"
[[ " ${cflags[*]} " == *" -std=c++23 "* ]] || fail "pkg-config --cflags has no -std=c++23: ${cflags[*]}"
[[ " ${libs[*]} " == *" -lswitchyard_client -lswitchyard_protocol "* ]] ||
  fail "pkg-config --libs does not list the client before the protocol library: ${libs[*]}"
read -ra extra_flags <<<"$extra"
run_logged "$work/pc-build.log" "$cxx" "${extra_flags[@]}" "${cflags[@]}" "$src/examples/send.cpp" -o "$work/send-pc" "${libs[@]}"
status=0
"$work/send-pc" user:nobody hello --address "127.0.0.1:$port" >"$work/send.out" || status=$?
[[ $status == 3 && $(cat "$work/send.out") == "no route" ]] ||
  fail "the pkg-config build of examples/send.cpp: exit $status, $(cat "$work/send.out")"

kill -TERM "$server_pid"
status=0; wait "$server_pid" || status=$?; server_pid=
[[ $status == 0 ]] || fail "switchyard-server exited $status after SIGTERM"
echo "ok: $mode install into $prefix, find_package and pkg-config consumers ran"
