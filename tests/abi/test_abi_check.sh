#!/usr/bin/env bash
# scripts/abi-check.sh against a small library built here in variants: it
# passes an unchanged library and a compatible addition, and fails a struct
# whose layout changed (a field inserted), a removed function, and a
# soname bump that docs/changes.md (here a stand-in) does not name.
# Skips (77) without abigail-tools or a C compiler.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v abidw >/dev/null && command -v cc >/dev/null || { echo "skip: needs abigail-tools and cc"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# variant NAME SONAME STRUCT_FIELDS EXTRA_DECL WITH_OPEN
variant() {
  local d=$tmp/$1
  mkdir -p "$d/include"
  cat >"$d/include/abifix.h" <<H
struct abifix_opts { $3 };
$( [ "$5" = 1 ] && echo "int abifix_open(const struct abifix_opts *o);" )
int abifix_close(int h);
$4
H
  {
    echo '#include "abifix.h"'
    [ "$5" = 1 ] && echo 'int abifix_open(const struct abifix_opts *o) { return o->a; }'
    echo 'int abifix_close(int h) { return h; }'
    [ -n "$4" ] && echo 'int abifix_extra(void) { return 1; }'
  } >"$d/abifix.c"
  cc -g -O1 -shared -fPIC -Wl,-soname,"$2" -I"$d/include" -o "$d/$2" "$d/abifix.c"
}
check() { # variant, changes file: abi-check's exit status
  "$root/scripts/abi-check.sh" --lib "$tmp/$1/$2" --abi "$tmp/recorded.abi" \
    --headers "$tmp/$1/include" --changes "$3" >"$tmp/out" 2>&1 && return 0
  return 1
}
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }

echo "# changes" >"$tmp/changes.md"
variant v1 libabifix.so.1 "int a; double b;" "" 1
variant added libabifix.so.1 "int a; double b;" "int abifix_extra(void);" 1
variant inserted libabifix.so.1 "int a; int inserted; double b;" "" 1
variant removed libabifix.so.1 "int a; double b;" "" 0
variant bumped libabifix.so.2 "int a; int inserted; double b;" "" 1

"$root/scripts/abi-check.sh" --lib "$tmp/v1/libabifix.so.1" --abi "$tmp/recorded.abi" \
  --headers "$tmp/v1/include" --update >/dev/null

check v1 libabifix.so.1 "$tmp/changes.md" || fail "the recorded library itself"
check added libabifix.so.1 "$tmp/changes.md" || fail "a compatible addition"
grep -q "compatible changes" "$tmp/out" || fail "an addition not reported"
check inserted libabifix.so.1 "$tmp/changes.md" && fail "a struct with a field inserted passed"
grep -q "incompatible ABI change" "$tmp/out" || fail "the layout change not named"
check removed libabifix.so.1 "$tmp/changes.md" && fail "a removed function passed"
check bumped libabifix.so.2 "$tmp/changes.md" && fail "a soname bump docs/changes.md does not name passed"
echo "libabifix.so.2: the struct changed" >>"$tmp/changes.md"
check bumped libabifix.so.2 "$tmp/changes.md" || fail "a soname bump named in docs/changes.md"
echo "ok: abi-check passes the same and added ABI, fails a changed layout, a removed function, an unsaid soname bump"
