#!/usr/bin/env bash
# chime-bench service through an emulated link (chime-link, docs/remote.md):
# for each RTT and loss, a chime-link of that RTT (at its top rate: no rate
# set), then tcp, grpc_plain and chime_stream across it, as JSON lines with
# "rtt_ms" and "loss" added. Needs root, iproute2 and /dev/net/tun.
# --ss FILE appends `ss -tin` of the server's side every 0.25 s to FILE
# (lines "T <epoch>" between samples): which layer holds the bytes back
# (docs/remote.md, "Under loss": app_limited, notsent, rwnd_limited, cwnd).
# Usage: scripts/bench-link.sh [--build DIR] [--rtt 1,10,50] [--loss 0,0.001]
#                              [--runs N] [--mib MIB] [--sizes 1,16]
#                              [--cc reno] [--mtu BYTES] [--even-loss]
#                              [--ss FILE] [--tcp-flows N] [--connections N]
set -euo pipefail
cd "$(dirname "$0")/.."

build=build rtts=1,10,50 losses=0,0.001 runs=3 mib=2048 sizes=1,16 ss_out=
link_args=() bench_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rtt) rtts=$2; shift 2 ;;
    --loss) losses=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --cc|--mtu) link_args+=("$1" "$2"); shift 2 ;;
    --even-loss) link_args+=("$1"); shift ;;
    --ss) ss_out=$2; shift 2 ;;
    --tcp-flows|--connections) bench_args+=("$1" "$2"); shift 2 ;;
    *) echo "bench-link.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench-link.sh: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null || { echo "bench-link.sh: needs iproute2 (ip)" >&2; exit 2; }

name=chbl$$
link_pid= ss_pid=
stop_link() {
  if [ -n "$ss_pid" ]; then
    kill "$ss_pid" 2>/dev/null || true
    wait "$ss_pid" 2>/dev/null || true
    ss_pid=
  fi
  if [ -n "$link_pid" ]; then
    kill "$link_pid" 2>/dev/null || true
    wait "$link_pid" 2>/dev/null || true
    link_pid=
  fi
}
trap stop_link EXIT

for rtt in ${rtts//,/ }; do
  for loss in ${losses//,/ }; do
    out=$(mktemp)
    "$build/bench/chime-link" "$name" --rtt-ms "$rtt" --loss "$loss" \
      ${link_args[@]+"${link_args[@]}"} >"$out" &
    link_pid=$!
    for _ in $(seq 100); do grep -q '^ready' "$out" && break; sleep 0.1; done
    grep -q '^ready' "$out" || { echo "bench-link.sh: chime-link did not start" >&2; exit 1; }
    rm -f "$out"
    if [ -n "$ss_out" ]; then
      (while :; do
        echo "T $(date +%s.%N) rtt_ms=$rtt loss=$loss"
        ip netns exec "$name-s" ss -tinH state established || true
        sleep 0.25
      done) >>"$ss_out" 2>/dev/null &
      ss_pid=$!
    fi
    "$build/bench/chime-bench" service --link "$name" --json --runs "$runs" \
      --mib "$mib" --sizes "$sizes" ${bench_args[@]+"${bench_args[@]}"} |
      sed -e "s/^{/{\"rtt_ms\":$rtt,\"loss\":$loss,\"link\":\"${link_args[*]:-}\",/"
    stop_link
  done
done
