#!/bin/sh
# Checks the names docs/architecture.md cites against the source tree, so
# that it cannot drift from the code: every `path/with/a/slash` must exist
# (a file or folder, relative to the source root), and every identifier in
# backquotes that names code (snake_case with an underscore, or a::b) must
# occur as a word in a source file (.hpp/.cpp/.fbs/CMakeLists.txt).
#   check_architecture_names.sh <source root>
set -eu
root=$1
doc=$root/docs/architecture.md
missing=0
checked=0
# Every backquoted span, one per line.
spans=$(grep -o '`[^`]*`' "$doc" | tr -d '`' | sort -u)
old_ifs=$IFS
IFS='
'
for span in $spans; do
  case $span in
    *' '*|*'<'*|*'*'*|*'{'*|-*|*'"'*|*'='*) continue ;;  # prose, patterns, flags, values
  esac
  case $span in
    */*)
      path=${span%/}
      path=${path%%:*}
      case $path in http*|/*|*..*) continue ;; esac
      checked=$((checked + 1))
      if [ ! -e "$root/$path" ]; then
        echo "docs/architecture.md cites $span: no such file or folder"
        missing=$((missing + 1))
      fi
      continue ;;
  esac
  # Identifiers: a::b::c(...) or snake_case names.
  name=${span%%(*}
  case $name in
    *::*|*_*) ;;
    *) continue ;;
  esac
  for word in $(echo "$name" | sed 's/::/\n/g'); do
    case $word in
      ''|*[!a-zA-Z0-9_~]*) continue ;;
    esac
    checked=$((checked + 1))
    if ! grep -rqw --include='*.hpp' --include='*.cpp' --include='*.fbs' --include=CMakeLists.txt \
         --include='*.cmake' --exclude-dir=build --exclude-dir=.git -- "$word" "$root"; then
      echo "docs/architecture.md cites $span: '$word' occurs in no source file"
      missing=$((missing + 1))
    fi
  done
done
IFS=$old_ifs
echo "docs/architecture.md: $checked names checked, $missing missing"
[ "$missing" -eq 0 ]
