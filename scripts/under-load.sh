#!/usr/bin/env bash
# Runs the Release suites of an existing build (CTest, then python/tests)
# ROUNDS times in a row while one busy loop per CPU competes with them, and
# stops at the first failure. A test that passes only on an idle machine is
# broken: CI's machine is shared, so this is how a race is found before CI
# finds it.
# Usage: [BUILD=build] [ROUNDS=3] scripts/under-load.sh [CTEST_ARGS...]
# (scripts/test.sh builds the tree first; this reuses what it built.)
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD:-build}
rounds=${ROUNDS:-3}
[ -x "$build/src/server/chimed" ] || {
  echo "scripts/under-load.sh: no chimed in $build (run scripts/test.sh or build first)" >&2
  exit 1
}

spinners=()
stop_spinners() {
  for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${spinners[@]}" 2>/dev/null || true
}
trap stop_spinners EXIT
for _ in $(seq "$(nproc)"); do
  bash -c 'while :; do :; done' &
  spinners+=($!)
done

for r in $(seq "$rounds"); do
  echo "== under load, round $r of $rounds: ctest"
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
  if compgen -G "$build/python/chime/_chime.*.so" >/dev/null; then
    echo "== under load, round $r of $rounds: python/tests"
    BUILD=$build scripts/pytest.sh
  fi
done
echo "== under load: $rounds rounds passed"
