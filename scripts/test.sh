#!/usr/bin/env bash
# The test command: installs what is missing, then builds and runs the whole
# CTest suite in a Release build (as root with apt-get, as in CI, that
# includes test_packages: the Debian packages built, installed, used and
# purged), then tests/interop (a Python client
# generated from proto/chime.proto, against the Release chimed;
# scripts/interop.sh), the tests of the `chime` Python package against the
# Release build (python/tests; scripts/pytest.sh), the CTest suite in an
# ASan+UBSan build, the ring and replay-engine tests under TSan in a build
# without the service (no gRPC), runs each fuzz target briefly
# (scripts/fuzz.sh; CHIME_FUZZ_SECONDS per target), and holds libchime.so
# to its recorded ABI (scripts/abi-check.sh, abi/libchime.abi).
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup
jobs=$(nproc)
werror=${CHIME_WERROR:-ON}

build() { # dir, cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCHIME_WERROR="$werror" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

run_ctest() { # dir, ctest args...
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@"
}

echo "== Release"
build build -DCMAKE_BUILD_TYPE=Release
run_ctest build

echo "== interop (Python client from proto/chime.proto)"
CHIMED=build/src/server/chimed scripts/interop.sh

echo "== Python package (python/tests, build/python)"
BUILD=build scripts/pytest.sh

echo "== ASan+UBSan"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DCHIME_SANITIZE=address,undefined
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest build-asan

echo "== ring and replay engine only (no gRPC), TSan"
build build-tsan -DCMAKE_BUILD_TYPE=Debug -DCHIME_WITH_SERVICE=OFF -DCHIME_SANITIZE=thread
TSAN_OPTIONS=halt_on_error=1 run_ctest build-tsan -L "ring|replay"

echo "== fuzz (libFuzzer, ${CHIME_FUZZ_SECONDS:-30} s per target)"
scripts/fuzz.sh "${CHIME_FUZZ_SECONDS:-30}"

echo "== ABI (libchime.so against abi/libchime.abi)"
scripts/abi-check.sh

echo "== all tests passed"
