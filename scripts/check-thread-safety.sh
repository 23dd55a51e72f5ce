#!/usr/bin/env bash
# Checks the lock rules the code states with Clang's thread-safety
# attributes (common/thread_annotations.hpp, common/mutex.hpp; the classes
# are listed in docs/architecture.md, "Threads and locks"): clang-14
# -fsyntax-only -Wthread-safety -Werror=thread-safety over the translation
# units that can see them, compiled as the build compiles them.
#
#   scripts/check-thread-safety.sh BUILD_DIR
#
# BUILD_DIR is a configured build (scripts/run-tests.sh's) with its
# compile_commands.json and generated headers. Prints one summary line, and
# on a violation clang's diagnostics; exits 1 then. Nothing is built.
# JOBS units are checked at once (default: the cores).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=$PWD
db=$build/compile_commands.json
[[ -f $db ]] || { echo "thread-safety: no $db (configure the build first)" >&2; exit 2; }
clang='clang++-14'
command -v "$clang" >/dev/null || { echo "thread-safety: $clang not found (scripts/setup.sh installs it)" >&2; exit 2; }

# What is checked: every translation unit of the libraries whose classes
# are shared between threads (a folder: all of its files, new ones
# included), and the files of admin/ and bench/ that use an annotated
# class (session_events, connect_log; receipt_sink).
folders=(storage client-lib broker/requests broker/cluster cluster chaos gateway)
files=(admin/cli.cpp admin/pubsub_commands.cpp bench/offers_workload.cpp)
# Left out, because clang-14 cannot parse them (checking their other
# functions is not possible: clang skips the analysis after an error):
#   client-lib/client_reconnect.cpp  restore()'s lambdas capture structured
#                                    bindings (C++20, clang 16 and later)
excluded=(client-lib/client_reconnect.cpp)

# The build's command for each of them (file, then command, one per line).
mapfile -t entries < <(jq -r --arg src "$src/" \
  --argjson folders "$(printf '%s\n' "${folders[@]}" | jq -R . | jq -s .)" \
  --argjson files "$(printf '%s\n' "${files[@]}" | jq -R . | jq -s .)" \
  '.[] | (.file | ltrimstr($src)) as $f
       | select(($f | startswith("build/")) | not)
       | select(([$folders[] as $d | $f | startswith($d + "/")] | any) or ($files | index($f)))
       | $f, .command' "$db")
declare -A seen=()
for ((i = 0; i < ${#entries[@]}; i += 2)); do seen[${entries[i]}]=1; done
for f in "${files[@]}" "${excluded[@]}"; do
  [[ -n ${seen[$f]:-} ]] || { echo "thread-safety: $f is not in $db" >&2; exit 2; }
done

# The build's flags, adapted for clang-14 the way the fuzz build does
# (CMakeLists.txt, SWITCHYARD_FUZZ): clang-14 cannot compile libstdc++ 12's
# <expected> (fuzz/compat stands in for it), and Boost 1.74's Asio needs
# to be told that clang has C++20 coroutines. GCC's precompiled header
# (-include .../cmake_pch.hxx, a .gch clang cannot read) becomes an
# -include of the headers it names. Warning, optimisation, debug and code
# generation flags (-W, -O, -g, -f) are dropped: only the thread-safety
# diagnostics matter here, and nothing is generated.
clang_flags() {  # the build's command -> the flags for clang, one per line
  local -a args
  mapfile -t args < <(printf '%s' "$1" | xargs printf '%s\n')
  local i a
  for ((i = 1; i < ${#args[@]}; ++i)); do
    a=${args[i]}
    case $a in
      -o | -c | -MF | -MT | -MQ) ((++i)) ;;
      -M*) ;;
      -include)
        a=${args[++i]}
        if [[ $a == */cmake_pch.hxx ]]; then
          sed -n 's/^#include "\(.*\)"$/-include\n\1/p' "$a"
        else
          printf '%s\n' -include "$a"
        fi ;;
      -std=c++23) echo -std=c++2b ;;
      -std=gnu++23) echo -std=gnu++2b ;;
      -W* | -O* | -g* | -f*) ;;
      *) printf '%s\n' "$a" ;;
    esac
  done
}

# One unit: its diagnostics on stderr, its name in $out/failed when it
# fails. Units run JOBS at a time (default: the cores).
check_one() {
  local f=$1 command=$2
  local -a flags
  mapfile -t flags < <(clang_flags "$command")
  if ! "$clang" -fsyntax-only -isystem "$src/fuzz/compat" -DBOOST_ASIO_HAS_CO_AWAIT=1 "${flags[@]}" \
      -Wno-everything -Wthread-safety -Werror=thread-safety "$src/$f"; then
    echo "$f" >> "$out/failed"
  fi
}
jobs=${JOBS:-$(nproc)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
checked=0
running=0
for ((i = 0; i < ${#entries[@]}; i += 2)); do
  f=${entries[i]}
  [[ " ${excluded[*]} " == *" $f "* ]] && continue
  checked=$((checked + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  check_one "$f" "${entries[i + 1]}" &
  running=$((running + 1))
done
wait || true
failed=()
[[ -f $out/failed ]] && mapfile -t failed < <(sort "$out/failed")
secs=$((SECONDS - start))
if ((${#failed[@]})); then
  echo "thread-safety: FAILED in ${#failed[@]} of $checked translation units: ${failed[*]} (${secs}s)"
  exit 1
fi
echo "thread-safety: $checked translation units clean (clang-14 -Wthread-safety; ${#excluded[@]} left out, see the script; ${secs}s)"
