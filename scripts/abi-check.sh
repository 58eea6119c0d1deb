#!/usr/bin/env bash
# The ABI guard (docs/install.md, "ABI"): libchime.so's ABI as built,
# compared by libabigail's abidiff (Debian's abigail-tools) with the one
# recorded in abi/libchime.abi. Fails on an incompatible change (a removed
# function, a struct that changed size or layout, a changed signature)
# unless the soname was bumped and docs/changes.md names the new soname;
# compatible additions pass (record them with --update, so their later
# removal is caught).
# Usage: scripts/abi-check.sh [--build DIR] [--update]
#   --build DIR  a tree built with debug info (default build-abi: the
#                library alone, RelWithDebInfo, made here)
#   --update     record the built ABI as abi/libchime.abi
# For tests/abi/test_abi_check.sh: --lib SO --abi FILE --headers DIR
#   --changes FILE check another library against another record.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-abi lib= abi=abi/libchime.abi headers=include/chime
changes=docs/changes.md update=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --update) update=1; shift ;;
    --lib) lib=$2; shift 2 ;;
    --abi) abi=$2; shift 2 ;;
    --headers) headers=$2; shift 2 ;;
    --changes) changes=$2; shift 2 ;;
    *) echo "abi-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v abidw >/dev/null || { echo "abi-check: needs abigail-tools (abidw, abidiff)" >&2; exit 2; }

if [ -z "$lib" ]; then
  if [ "$build" = build-abi ]; then
    cmake -S . -B build-abi -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build-abi -j "$(nproc)" --target chime >/dev/null
  fi
  lib=$build/src/lib/libchime.so
fi
[ -f "$lib" ] || { echo "abi-check: $lib not built" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
abidw --headers-dir "$headers" --drop-private-types --no-corpus-path \
  --no-show-locs --type-id-style hash "$lib" >"$tmp/built.abi"
soname() { sed -n "s/.*soname='\([^']*\)'.*/\1/p" "$1" | head -1; }
built=$(soname "$tmp/built.abi")

if [ -n "$update" ]; then
  cp "$tmp/built.abi" "$abi"
  echo "abi-check: recorded the ABI of $built in $abi"
  exit 0
fi
[ -f "$abi" ] || { echo "abi-check: no recorded ABI at $abi (--update records one)" >&2; exit 1; }
recorded=$(soname "$abi")

if [ "$built" != "$recorded" ]; then
  if grep -qF "$built" "$changes"; then
    echo "abi-check: soname bumped $recorded -> $built (in $changes): record its ABI with --update"
    exit 0
  fi
  echo "abi-check: soname changed $recorded -> $built, but $changes does not name $built" >&2
  exit 1
fi

set +e
abidiff --no-show-locs "$abi" "$tmp/built.abi" >"$tmp/report"
rc=$?
set -e
if [ $((rc & 3)) -ne 0 ]; then
  cat "$tmp/report" >&2
  echo "abi-check: abidiff failed (exit $rc)" >&2
  exit 1
fi
# abidiff's summary lines: "Functions changes summary: R Removed, C
# Changed, A Added function" and the same for variables. Compatible means
# nothing recorded removed or changed (a changed layout reached from a
# function is a "Changed" function); additions are fine.
bad=$(sed -n 's/.*summary: \([0-9]*\) Removed[^,]*, \([0-9]*\) Changed.*/\1 \2/p' "$tmp/report" |
  awk '{ n += $1 + $2 } END { print n + 0 }')
if [ $((rc & 8)) -ne 0 ] || [ "$bad" -ne 0 ]; then
  cat "$tmp/report" >&2
  echo "abi-check: an incompatible ABI change in $built without a soname bump:" \
    "bump the soname (the project version) and say it in $changes, or undo it" >&2
  exit 1
fi
added=$(grep -c "[1-9][0-9]* Added" "$tmp/report" || true)
if [ $((rc & 4)) -ne 0 ] || [ "$added" -ne 0 ]; then
  cat "$tmp/report"
  echo "abi-check: compatible changes to $built (above): record them with --update"
fi
echo "abi-check: $built keeps the recorded ABI"
