#!/usr/bin/env bash
# The shell scripts of tests/ and scripts/ that run under pipefail pipe
# nothing into grep -q: grep exits at its first match, the command before
# it dies of SIGPIPE if it was still writing, and pipefail then fails the
# pipeline although the line was there. It happened: test_install's
# `printf '%s\n' "${pcout[@]}" | grep -qx -- -lgrpc` said "pkg-config
# --static --libs chime lacks -lgrpc" once in CI (1 run in ~150 on a busy
# machine). Match a captured text instead (grep -q <<<"$text", or [[ ]]).
# Run by CTest (test_shell_pipes) with CHIME_SOURCE_DIR.
set -euo pipefail

src=${CHIME_SOURCE_DIR:?}
bad=0
while IFS= read -r -d '' f; do
  grep -q 'set -[a-z]*o pipefail\|set -o pipefail' "$f" || continue
  if grep -nE '^[^#]*\|[[:space:]]*grep[[:space:]]+(-[A-Za-z]*q[A-Za-z]*|--quiet|--silent)\b' "$f"; then
    echo "test_shell_pipes: $f pipes into grep -q under pipefail (above)" >&2
    bad=1
  fi
done < <(find "$src/tests" "$src/scripts" "$src/.ci" -type f \
  \( -name '*.sh' -o -path "$src/scripts/*" -o -path "$src/.ci/*" \) \
  -print0)
[ "$bad" = 0 ] && echo "test_shell_pipes: OK"
exit "$bad"
