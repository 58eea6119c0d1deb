#!/usr/bin/env bash
# Two `cmake --install` of the dev component from this build tree at once,
# into two prefixes, 20 times: each prefix's chime.pc and chime-static.pc
# name that prefix and are whole. The .pc files used to be written to one
# path of the build tree at install time, and such pairs installed each
# other's prefix or a half-written file (14 of 120 files in 30 pairs; now
# each install writes into a directory of its own). It cannot prove the
# race gone, only catch it back: against the old rules it failed every run.
# Run by CTest (label install) with CHIME_BUILD_DIR, CHIME_SOURCE_DIR,
# CHIME_INSTALL_LIBDIR and CMAKE.
set -euo pipefail

build=${CHIME_BUILD_DIR:?}
src=${CHIME_SOURCE_DIR:?}
test_name=test_install_race
# shellcheck source=../support/shtest.sh
. "$src/tests/support/shtest.sh"
libdir=${CHIME_INSTALL_LIBDIR:-lib}
cmake=${CMAKE:-cmake}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-install-race.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 20); do
  "$cmake" --install "$build" --component dev --prefix "$tmp/a" \
    >"$tmp/a.log" 2>&1 &
  a=$!
  "$cmake" --install "$build" --component dev --prefix "$tmp/b" \
    >"$tmp/b.log" 2>&1 &
  b=$!
  wait "$a" || fail "round $i: install into a failed: $(cat "$tmp/a.log")"
  wait "$b" || fail "round $i: install into b failed: $(cat "$tmp/b.log")"
  for x in a b; do
    for pc in chime chime-static; do
      f=$tmp/$x/$libdir/pkgconfig/$pc.pc
      [ -f "$f" ] || fail "round $i: $x has no $pc.pc"
      text=$(cat "$f")
      [[ $text == "prefix=$tmp/$x"$'\n'* ]] ||
        fail "round $i: $x's $pc.pc names another prefix: $(head -n1 "$f")"
      [[ $text == *$'\n'Libs:* ]] || fail "round $i: $x's $pc.pc is cut short"
    done
  done
  rm -rf "$tmp/a" "$tmp/b"
done
echo "test_install_race: OK"
