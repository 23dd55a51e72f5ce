#!/bin/sh
# Fails when a C++ source file differs from what clang-format-14 makes of it
# with the repository's .clang-format, and names the files.
# Usage: check_format.sh <source root>   (a git checkout: the files are git's)
# Fix: git ls-files '*.cpp' '*.hpp' | grep -v '^fuzz/compat/' | xargs clang-format-14 -i
set -eu
cd "$1"
files=$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc' | grep -v '^fuzz/compat/')
# shellcheck disable=SC2086  # one word per file (no spaces in our paths)
if ! out=$(clang-format-14 --dry-run -Werror $files 2>&1); then
  echo "not formatted (run clang-format-14 -i on them):" >&2
  printf '%s\n' "$out" | sed -n 's/^\([^: ]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/  \1/p' | sort -u >&2
  exit 1
fi
echo "$(echo "$files" | wc -l) files formatted"
