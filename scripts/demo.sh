#!/usr/bin/env bash
# chime demo: builds chime, starts chimed, runs two actors and two learners
# (one in auto mode, which maps the ring on this host, one streaming over
# gRPC), checks every byte of every batch and that every inserted sample was
# delivered exactly once, prints a summary and stops everything.
# Exits 0 only if everything verified.
#
# Usage: scripts/demo.sh      (as root or with sudo, on Debian 12)
# Environment: CHIME_DEMO_BUILD (build dir, default build), CHIME_DEMO_COUNT
# (samples per actor, default 20000), CHIME_DEMO_BATCH (batch size, 100).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${CHIME_DEMO_BUILD:-build}
count=${CHIME_DEMO_COUNT:-20000}
batch=${CHIME_DEMO_BATCH:-100}
table=demo
total=$((2 * count))
if [ $((total % batch)) -ne 0 ]; then
  echo "demo: 2 * $count samples do not divide into batches of $batch" >&2
  exit 2
fi

scripts/setup
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "== configuring $build (Release)"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
echo "== building"
cmake --build "$build" -j "$(nproc)" --target chimed chime-actor chime-learner chimectl >/dev/null

chimed=$build/src/server/chimed
actor=$build/examples/chime-actor
learner=$build/examples/chime-learner
chimectl=$build/examples/chimectl

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-demo.XXXXXX")
pids=()
chimed_pid=""
cleanup() {
  local p
  for p in "${pids[@]}" $chimed_pid; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}" $chimed_pid; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting chimed"
"$chimed" --listen 127.0.0.1:0 >"$tmp/chimed.out" 2>"$tmp/chimed.err" &
chimed_pid=$!
addr=""
for _ in $(seq 100); do
  addr=$(sed -n 's/^listening on //p' "$tmp/chimed.out" | head -n1)
  [ -n "$addr" ] && break
  if ! kill -0 "$chimed_pid" 2>/dev/null; then
    echo "demo: chimed exited:" >&2
    cat "$tmp/chimed.err" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "demo: chimed did not say 'listening on' within 10 s" >&2
  exit 1
fi
echo "chimed listening on $addr"
"$chimectl" info "$addr"

# Learners first: they wait for data and share the fifo table, so they stop
# when the table has been idle for 3 s after their first batch.
echo "== 2 learners (auto, stream), 2 actors ($count samples each)"
"$learner" --server "$addr" --table "$table" --batch-size "$batch" \
  --batches 0 --until-idle 3000 --mode auto --ids-out "$tmp/ids.auto" \
  >"$tmp/learner.auto" 2>"$tmp/learner.auto.err" &
pids+=($!)
learner_auto=$!
"$learner" --server "$addr" --table "$table" --batch-size "$batch" \
  --batches 0 --until-idle 3000 --mode stream --ids-out "$tmp/ids.stream" \
  >"$tmp/learner.stream" 2>"$tmp/learner.stream.err" &
pids+=($!)
learner_stream=$!
"$actor" --server "$addr" --table "$table" --count "$count" --seed 1 \
  >"$tmp/actor.1" 2>"$tmp/actor.1.err" &
pids+=($!)
actor1=$!
"$actor" --server "$addr" --table "$table" --count "$count" --seed 2 \
  >"$tmp/actor.2" 2>"$tmp/actor.2.err" &
pids+=($!)
actor2=$!

ok=1
st=0
reap() { # pid -> its exit status in $st, without tripping set -e
  st=0
  wait "$1" || st=$?
}
reap "$actor1"
rc_a1=$st
reap "$actor2"
rc_a2=$st
reap "$learner_auto"
rc_la=$st
reap "$learner_stream"
rc_ls=$st

field() { # file key -> value of "key" in its last JSON line
  local line
  line=$(grep '^{' "$1" 2>/dev/null | tail -n1)
  echo "$line" | sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" | tr -d '"'
}

echo
echo "== chimectl stats"
"$chimectl" stats "$addr" || ok=0

echo
printf '%-16s %-7s %9s %9s %-9s %s\n' WHO MODE SAMPLES BATCHES VERIFIED RATE
for a in 1 2; do
  f=$tmp/actor.$a
  rc=$rc_a1
  [ "$a" = 2 ] && rc=$rc_a2
  ins=$(field "$f" inserted)
  printf '%-16s %-7s %9s %9s %-9s %s\n' "actor seed $a" - "${ins:-?}" - \
    "$([ "$rc" = 0 ] && echo acked || echo FAILED)" \
    "$(field "$f" samples_per_s) samples/s"
  if [ "$rc" != 0 ] || [ "${ins:-}" != "$count" ]; then
    ok=0
    cat "$f.err" >&2
  fi
done
got=0
for m in auto stream; do
  f=$tmp/learner.$m
  rc=$rc_la
  [ "$m" = stream ] && rc=$rc_ls
  mode=$(field "$f" mode)
  nb=$(field "$f" batches)
  ver=$(field "$f" verified)
  printf '%-16s %-7s %9s %9s %-9s %s\n' "learner $m" "${mode:-?}" \
    "$((${nb:-0} * batch))" "${nb:-?}" "${ver:-?}" "$(field "$f" gbps) GB/s"
  fb=$(field "$f" fallback_reason)
  [ -n "$fb" ] && [ "$fb" != null ] && echo "  fallback: $fb"
  if [ "$rc" != 0 ] || [ "$ver" != true ]; then
    ok=0
    cat "$f.err" >&2
  fi
  got=$((got + ${nb:-0} * batch))
done
if [ "$(field "$tmp/learner.auto" mode)" != shm ]; then
  echo "demo: the auto learner did not use shm" >&2
  ok=0
fi

# fifo: every inserted sample reaches exactly one learner, exactly once.
unique=$(cat "$tmp/ids.auto" "$tmp/ids.stream" 2>/dev/null | sort -u | wc -l)
echo
echo "samples inserted: $total, delivered: $got, distinct ids: $unique"
if [ "$got" != "$total" ] || [ "$unique" != "$total" ]; then
  echo "demo: delivered samples do not match the inserted ones" >&2
  ok=0
fi

echo "== stopping chimed"
kill -TERM "$chimed_pid"
reap "$chimed_pid"
rc_d=$st
chimed_pid=""
if [ "$rc_d" != 0 ]; then
  echo "demo: chimed exited with $rc_d" >&2
  cat "$tmp/chimed.err" >&2
  ok=0
fi

if [ "$ok" = 1 ]; then
  echo "demo: OK, every batch verified"
  exit 0
fi
echo "demo: FAILED" >&2
exit 1
