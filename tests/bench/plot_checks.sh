# Shared by the plot scripts' tests (sourced, not run): skips the test
# (exit 77) without gnuplot and jq; with script_test.sh's $tmp and fail(),
# gives is_png() and expect_failure(), which runs "$plot" (the caller sets
# it) with the given arguments.
. "$(dirname "$0")/script_test.sh"
needs gnuplot jq

# is_png FILE MIN_BYTES: the PNG signature and at least MIN_BYTES bytes
is_png() {
  [ -f "$1" ] || { fail "$1 was not written"; return; }
  sig=$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')
  [ "$sig" = 89504e470d0a1a0a ] || fail "$1 does not start with the PNG signature (got $sig)"
  bytes=$(wc -c <"$1" | tr -d ' ')
  [ "$bytes" -ge "$2" ] || fail "$1 has $bytes bytes, expected at least $2"
}

# expect_failure NAME EXPECTED_TEXT ARGS...: exits non-zero, says EXPECTED_TEXT on stderr, writes no PNG
expect_failure() {
  name=$1 text=$2
  shift 2
  if sh "$plot" "$@" >"$tmp/out" 2>"$tmp/err"; then
    fail "$name: exited 0"
  elif ! grep -q -- "$text" "$tmp/err"; then
    fail "$name: stderr lacks '$text': $(cat "$tmp/err")"
  fi
  [ ! -e "$tmp/never.png" ] || fail "$name: wrote a PNG"
}
