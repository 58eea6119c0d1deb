#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang in a build dir of
# their own and runs each for N seconds over a scratch copy of its seed
# corpus (the checked-in corpus is never written). Fails on any crash,
# sanitizer report, failed check, leak or timeout; the input that did it is
# left in <build dir>/fuzz-artifacts/.
#
# Usage: scripts/fuzz.sh [seconds per target] [target...]
#   targets: insertreq chunk ring_attach config handoff requests checkpoint
#            target zleaf zinsert
#            (default: all)
#   CHIME_FUZZ_BUILD_DIR  build dir (default build-fuzz)
#   CHIME_FUZZ_KEEP=1     keep the grown corpora (printed at the end)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-15}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(insertreq chunk ring_attach config handoff requests checkpoint target zleaf zinsert)
dir=${CHIME_FUZZ_BUILD_DIR:-build-fuzz}

scripts/setup fuzz
CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCHIME_FUZZ=ON \
  -DBUILD_TESTING=OFF -DCHIME_WERROR="${CHIME_WERROR:-ON}" >/dev/null
cmake --build "$dir" -j "$(nproc)" --target fuzz

# Largest input per target: the ring's header alone is about 10 KiB.
declare -A max_len=([insertreq]=4096 [chunk]=4096 [ring_attach]=32768
                    [config]=8192 [handoff]=256 [requests]=4096
                    [checkpoint]=4096 [target]=512 [zleaf]=16384
                    [zinsert]=4096)

mkdir -p "$dir/fuzz-artifacts"
work=$(mktemp -d)
[ "${CHIME_FUZZ_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
status=0
for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { echo "scripts/fuzz.sh: no target '$t'" >&2; exit 2; }
  mkdir -p "$work/$t"
  cp tests/fuzz/corpus/"$t"/* "$work/$t/"
  log="$work/$t.log"
  # detect_leaks: a leak on a rejected input is a bug too.
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$dir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -max_len="${max_len[$t]}" -print_final_stats=1 \
    -artifact_prefix="$dir/fuzz-artifacts/$t-" "$work/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz_$t: ok, ${runs:-?} inputs in ${secs}s, corpus $(ls "$work/$t" | wc -l) inputs"
  else
    status=1
    echo "fuzz_$t: FAILED (reproduce: $dir/tests/fuzz/fuzz_$t <input>)" >&2
    grep -v -E '^#[0-9]+' "$log" | tail -60 >&2
  fi
done
[ "${CHIME_FUZZ_KEEP:-0}" = 1 ] && echo "grown corpora: $work"
exit $status
