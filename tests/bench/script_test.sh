# Shared by the bench scripts' tests (sourced, not run): needs TOOL... skips
# the test (exit 77, ctest: skipped) unless every TOOL is on PATH; a
# temporary folder $tmp (removed on exit); fail MESSAGE prints it and counts
# it in $failures.
needs() {
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 && continue
    echo "skipped: needs $* (scripts/setup.sh installs them)"
    exit 77
  done
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
