#!/usr/bin/env bash
# The soak: chimed under actors and learners for M minutes, with learners in
# shm and stream mode opened, closed and SIGKILLed in a loop. Every 10 s it
# samples chimed's RSS, open fds and threads; after the warm-up (the first
# fifth of the run, at least 60 s) an RSS sample above 110% of the
# warm-up's highest fails the run, and so do three samples in a row of fds
# or threads above 110% of theirs (they swing with the clients connected at
# the instant; a leak stays). It also fails on any error it did not cause
# (an actor that fails, a learner that fails without being killed, chimed
# dying or not exiting 0 at SIGTERM) and, for the fifo table, on any item
# not accounted for: every id the actors had acked must be in some
# learner's ids file (learners write a batch's ids before they release it;
# a killed learner's unreleased batches go back to the table and are
# delivered again, so duplicates are counted, not failures), and nothing
# else may be. chimed takes a checkpoint a minute (checkpoint.interval_s
# 60, keep 2) while all that goes on, and one more is asked for with
# chimectl halfway through the warm-up (a checkpoint's memory is then part
# of the warm-up's figures); a failed checkpoint fails the run, and at the
# end a second chimed must start from the newest one (--restore latest).
# At the end it prints chimed's largest mappings after the warm-up and at
# the end, to tell where a growth is (the tables' storage, glibc's arenas).
#
# Usage: scripts/soak.sh [--minutes M] [--actors A] [--learners L]
#        defaults: 30 minutes, 16 actors, 8 learners. Exits 0 on success.
#        CHIME_SOAK_BUILD: the build dir (default build), CHIME_SOAK_KEEP=1
#        keeps the run's files, CHIME_SOAK_NO_CHECKPOINTS=1 takes none (a
#        run to compare with).
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=30
nactors=16
nlearners=8
while [ $# -gt 0 ]; do
  case "$1" in
  --minutes) minutes=$2; shift 2 ;;
  --actors) nactors=$2; shift 2 ;;
  --learners) nlearners=$2; shift 2 ;;
  -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
  *) echo "soak: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for v in "$minutes" "$nactors" "$nlearners"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "soak: '$v' is not a positive integer" >&2; exit 2; }
done

build=${CHIME_SOAK_BUILD:-build}
# CHIME_SOAK_NO_CHECKPOINTS=1: no checkpoints at all, to compare with.
ckpt_every=60
[ -n "${CHIME_SOAK_NO_CHECKPOINTS:-}" ] && ckpt_every=0
scripts/setup
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target chimed chime-actor chime-learner chimectl >/dev/null
chimed=$build/src/server/chimed
actor=$build/examples/chime-actor
learner=$build/examples/chime-learner
chimectl=$build/examples/chimectl

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-soak.XXXXXX")
chimed_pid=""
declare -A kids=() # pid -> what it is
cleanup() {
  local p
  for p in "${!kids[@]}" $chimed_pid; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${CHIME_SOAK_KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "soak: FAILED: $*" >&2
  exit 1
}

cat >"$tmp/chimed.json" <<EOF
{"listen": "127.0.0.1:0",
 "checkpoint": {"dir": "$tmp/ckpt", "interval_s": $ckpt_every, "keep": 2},
 "budgets": {"stream_ring_bytes": 67108864, "total_ring_bytes": 1073741824},
 "tables": [
  {"name": "fifo", "spec": "obs:f32[64], action:i32[], reward:f32[]",
   "capacity": 200000, "sampler": "fifo"},
  {"name": "uniform", "spec": "obs:f32[64], action:i32[], reward:f32[]",
   "capacity": 100000, "sampler": "uniform", "min_size": 1000}]}
EOF
"$chimed" --config "$tmp/chimed.json" >"$tmp/chimed.out" 2>"$tmp/chimed.err" &
chimed_pid=$!
addr=""
for _ in $(seq 100); do
  addr=$(sed -n 's/^listening on //p' "$tmp/chimed.out" | head -n1)
  [ -n "$addr" ] && break
  kill -0 "$chimed_pid" 2>/dev/null || { cat "$tmp/chimed.err" >&2; fail "chimed exited at start"; }
  sleep 0.1
done
[ -n "$addr" ] || fail "chimed did not say 'listening on'"
echo "soak: chimed $chimed_pid on $addr for $minutes min, $nactors actors, $nlearners learners; files in $tmp"

per_round=20000 # samples per actor run
seed=0
killed=0
learner_runs=0
actor_runs=0
fifo_acked=() # "seed count" of every fifo actor run that exited 0

start_actor() { # slot
  local slot=$1 table=fifo
  [ $((slot % 2)) -eq 1 ] && table=uniform
  seed=$((seed + 1))
  "$actor" --server "$addr" --table "$table" --count "$per_round" --seed "$seed" \
    >"$tmp/actor.$seed.out" 2>"$tmp/actor.$seed.err" &
  kids[$!]="actor $slot $table $seed"
  actor_runs=$((actor_runs + 1))
}

lrun=0
start_learner() { # slot
  local slot=$1 table=fifo mode=shm
  [ $((slot % 2)) -eq 1 ] && mode=stream
  [ $((slot % 4)) -ge 2 ] && table=uniform
  lrun=$((lrun + 1))
  # Runs of 20-200 batches; a third of them are SIGKILLed 20-620 ms in.
  local batches=$((20 + RANDOM % 180))
  "$learner" --server "$addr" --table "$table" --batch-size 64 --batches "$batches" \
    --mode "$mode" --timeout-ms 60000 --ids-out "$tmp/ids.$table.$lrun" \
    >"$tmp/learner.$lrun.out" 2>"$tmp/learner.$lrun.err" &
  local pid=$!
  local kill_at=0
  [ $((RANDOM % 3)) -eq 0 ] && kill_at=$(($(date +%s%N) / 1000000 + 20 + RANDOM % 600))
  kids[$pid]="learner $slot $table $mode $lrun $kill_at"
  learner_runs=$((learner_runs + 1))
}

actors_alive() {
  local p
  for p in "${!kids[@]}"; do
    [ "${kids[$p]%% *}" = actor ] && return 0
  done
  return 1
}

# chimed's largest mappings by RSS ("rss_kb size_kb name"), so a growth
# can be told apart: the tables' storage, glibc's arenas, rings.
smaps_top() { # file
  awk '/^[0-9a-f]+-[0-9a-f]+ / { name = ($6 == "" ? "anon" : $6) }
       /^Size:/ { size = $2 } /^Rss:/ { if ($2 > 1024) print $2, size, name }' \
    "/proc/$chimed_pid/smaps" 2>/dev/null | sort -rn | head -n 12 >"$1"
}

sample() { # -> "rss_kb fds threads"
  local rss thr fds
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$chimed_pid/status")
  thr=$(awk '/^Threads:/ {print $2}' "/proc/$chimed_pid/status")
  fds=$(ls "/proc/$chimed_pid/fd" | wc -l)
  echo "$rss $fds $thr"
}

for i in $(seq 0 $((nactors - 1))); do start_actor "$i"; done
for i in $(seq 0 $((nlearners - 1))); do start_learner "$i"; done

t0=$(date +%s)
end=$((t0 + minutes * 60))
warm=$((minutes * 60 / 5))
[ "$warm" -lt 60 ] && warm=60
next_sample=$t0
base_rss=0 base_fds=0 base_thr=0
max_rss=0 max_fds=0 max_thr=0
fds_over=0 thr_over=0
early_ckpt=0
echo "    t(s)   rss_kb  fds threads  actor-runs learner-runs killed"
while :; do
  now=$(date +%s)
  kill -0 "$chimed_pid" 2>/dev/null || fail "chimed died ($(tail -n3 "$tmp/chimed.err"))"
  if [ "$now" -ge "$next_sample" ]; then
    read -r rss fds thr < <(sample)
    printf '%8d %8d %4d %7d  %10d %12d %6d\n' $((now - t0)) "$rss" "$fds" "$thr" \
      "$actor_runs" "$learner_runs" "$killed"
    if [ $((now - t0)) -lt "$warm" ]; then
      [ "$rss" -gt "$base_rss" ] && base_rss=$rss
      [ "$fds" -gt "$base_fds" ] && base_fds=$fds
      [ "$thr" -gt "$base_thr" ] && base_thr=$thr
    else
      [ -f "$tmp/smaps.warm" ] || smaps_top "$tmp/smaps.warm"
      [ "$rss" -gt "$max_rss" ] && max_rss=$rss
      [ "$fds" -gt "$max_fds" ] && max_fds=$fds
      [ "$thr" -gt "$max_thr" ] && max_thr=$thr
      [ $((rss * 10)) -le $((base_rss * 11)) ] || fail "RSS ${rss} kB > 110% of the warm-up's ${base_rss} kB"
      # fds and threads swing with the clients connected at the instant
      # (each learner's ring, handoff connection and pidfd; each actor's
      # connection): a leak raises them for good, so three samples in a
      # row (30 s) above the bound fail, not one.
      if [ $((fds * 10)) -gt $((base_fds * 11)) ]; then
        fds_over=$((fds_over + 1))
        [ "$fds_over" -lt 3 ] || fail "$fds fds > 110% of the warm-up's $base_fds for 30 s"
      else
        fds_over=0
      fi
      if [ $((thr * 10)) -gt $((base_thr * 11)) ]; then
        thr_over=$((thr_over + 1))
        [ "$thr_over" -lt 3 ] || fail "$thr threads > 110% of the warm-up's $base_thr for 30 s"
      else
        thr_over=0
      fi
    fi
    next_sample=$((next_sample + 10))
  fi
  if [ "$early_ckpt" = 0 ] && [ "$ckpt_every" != 0 ] && [ $((now - t0)) -ge $((warm / 2)) ]; then
    "$chimectl" checkpoint "$addr" >>"$tmp/checkpoints.txt" 2>&1 ||
      fail "chimectl checkpoint: $(tail -n1 "$tmp/checkpoints.txt")"
    early_ckpt=1
  fi
  nowms=$(($(date +%s%N) / 1000000))
  for pid in "${!kids[@]}"; do
    read -r kind slot rest <<<"${kids[$pid]}"
    if [ "$kind" = learner ]; then
      kill_at=${rest##* }
      if [[ "$kill_at" =~ ^[1-9][0-9]*$ ]] && [ "$nowms" -ge "$kill_at" ] && kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
        kids[$pid]="${kids[$pid]% *} killed"
        rest="${rest% *} killed"
      fi
    fi
    kill -0 "$pid" 2>/dev/null && continue
    st=0
    { wait "$pid"; } 2>/dev/null || st=$? # no "Killed" notice for our kills
    unset "kids[$pid]"
    if [ "$kind" = actor ]; then
      read -r table s <<<"$rest"
      [ "$st" -eq 0 ] || { cat "$tmp/actor.$s.err" >&2; fail "actor seed $s exited $st"; }
      [ "$table" = fifo ] && fifo_acked+=("$s")
      [ "$now" -lt "$end" ] && start_actor "$slot"
    else
      read -r table mode run tail <<<"$rest"
      if [ "$st" -ne 0 ] && [ "$tail" != killed ]; then
        cat "$tmp/learner.$run.err" >&2
        fail "learner run $run ($table, $mode) exited $st"
      fi
      # Past the end, learners go on while actors may wait for room.
      if [ "$now" -lt "$end" ] || actors_alive; then start_learner "$slot"; fi
    fi
  done
  [ "$now" -ge "$end" ] && [ "${#kids[@]}" -eq 0 ] && break
  sleep 0.2
done

# Drain the fifo table: learners of both modes until it stays idle.
for mode in shm stream; do
  lrun=$((lrun + 1))
  "$learner" --server "$addr" --table fifo --batch-size 1 --batches 0 \
    --until-idle 3000 --timeout-ms 5000 --mode "$mode" \
    --ids-out "$tmp/ids.fifo.$lrun" >"$tmp/learner.$lrun.out" 2>"$tmp/learner.$lrun.err" ||
    { cat "$tmp/learner.$lrun.err" >&2; fail "draining learner ($mode) failed"; }
done
"$chimectl" stats "$addr" >"$tmp/stats.txt" || fail "chimectl stats failed"
smaps_top "$tmp/smaps.end"
echo "soak: chimed's largest mappings (rss_kb size_kb), after the warm-up and at the end:"
paste -d'|' "$tmp/smaps.warm" "$tmp/smaps.end" 2>/dev/null |
  awk -F'|' '{ printf "  %-40s | %s\n", $1, $2 }' || true
kill -TERM "$chimed_pid"
st=0
wait "$chimed_pid" || st=$?
chimed_pid=""
[ "$st" -eq 0 ] || fail "chimed exited $st at SIGTERM"

# Checkpoints: one a minute, none failed, the newest loads.
if [ "$ckpt_every" != 0 ]; then
  grep -q "checkpoint failed" "$tmp/chimed.err" &&
    fail "a checkpoint failed: $(grep "checkpoint failed" "$tmp/chimed.err" | head -n1)"
  last=$(ls -d "$tmp"/ckpt/ckpt-* 2>/dev/null | sort -V | tail -n1)
  nckpt=$((10#${last##*ckpt-}))
  [ "$nckpt" -ge $((minutes - 1)) ] || fail "$nckpt checkpoints in $minutes minutes"
  "$chimed" --config "$tmp/chimed.json" --restore latest >"$tmp/restore.out" 2>"$tmp/restore.err" &
  chimed_pid=$!
  for _ in $(seq 300); do
    grep -q '^listening on ' "$tmp/restore.out" && break
    kill -0 "$chimed_pid" 2>/dev/null || { cat "$tmp/restore.err" >&2; fail "chimed --restore latest exited"; }
    sleep 0.1
  done
  grep -q '^listening on ' "$tmp/restore.out" || fail "chimed --restore latest did not start"
  kill -TERM "$chimed_pid"
  wait "$chimed_pid" || fail "restored chimed exited non-zero at SIGTERM"
  chimed_pid=""
  echo "soak: $nckpt checkpoints ($(cat "$tmp/checkpoints.txt")); $(sed -n 's/^chimed: restored //p' "$tmp/restore.err")"
fi

# Accounting for the fifo table.
# ids are (seed << 40) | i, past 2^53 once seed >= 8192 (a 30-minute run
# gets there): integers in Python, not awk's doubles.
printf '%s\n' "${fifo_acked[@]}" | python3 -c '
import sys
n = int(sys.argv[1])
for line in sys.stdin:
    if line.strip():
        base = int(line) << 40
        sys.stdout.write("".join("%d\n" % (base + i) for i in range(n)))
' "$per_round" | sort -u >"$tmp/expected"
cat "$tmp"/ids.fifo.* 2>/dev/null | sort >"$tmp/delivered.all"
sort -u "$tmp/delivered.all" >"$tmp/delivered"
missing=$(comm -23 "$tmp/expected" "$tmp/delivered" | wc -l)
extra=$(comm -13 "$tmp/expected" "$tmp/delivered" | wc -l)
dups=$(($(wc -l <"$tmp/delivered.all") - $(wc -l <"$tmp/delivered")))
echo "soak: fifo: $(wc -l <"$tmp/expected") acked, $(wc -l <"$tmp/delivered") delivered," \
  "$dups delivered again (after $killed kills), $missing missing, $extra unknown"
echo "soak: after warm-up (${warm} s): RSS max ${max_rss} kB (warm-up ${base_rss}), fds max $max_fds ($base_fds)," \
  "threads max $max_thr ($base_thr); $actor_runs actor runs, $learner_runs learner runs, $killed SIGKILLed"
[ "$missing" -eq 0 ] || fail "$missing acked fifo items never delivered"
[ "$extra" -eq 0 ] || fail "$extra delivered ids no actor inserted"
echo "soak: passed"
