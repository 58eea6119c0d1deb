#!/usr/bin/env bash
# Runs the chime-bench commands behind the figures in docs/ and prints
# each table as Markdown, the commands that made it named above it, so
# that a table in the docs can be made again by anyone with a build.
# Usage: scripts/bench-docs.sh [--build DIR] [--long|--smoke] [--out DIR] [TABLE...]
#   TABLE: ring service learners ingest replay sequence shards (none:
#          all, in that order; about 7-11 minutes on 2 cores)
#   --build DIR  the build tree (default build): DIR/bench/chime-bench,
#                and DIR/src/server/chimed for service, learners, ingest,
#                shards
#   --long       the larger cases too: replay and sequence at 10^7 items
#                or steps (about 10 GB of memory more, minutes more)
#   --out DIR    also keep each command's JSON lines in DIR
#   --smoke      every command on tiny sizes, seconds in all: checks that
#                the tables still come out (ctest bench_docs_smoke), the
#                figures mean nothing
# A table is one machine at one moment: run it idle, and compare ratios
# (each measured in one run against its baseline), not bare GB/s, between
# machines. Figures that are not chime-bench's (python/bench.py, tests
# with CHIME_*_MEASURE=1) name their own command where the docs quote them.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
long=
smoke=
out=
tables=()
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$2; shift 2 ;;
  --long) long=1; shift ;;
  --smoke) smoke=1; shift ;;
  --out) out=$2; shift 2 ;;
  -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  ring | service | learners | ingest | replay | sequence | shards) tables+=("$1"); shift ;;
  *) echo "scripts/bench-docs.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
[ ${#tables[@]} -gt 0 ] || tables=(ring service learners ingest replay sequence shards)

bench=$build/bench/chime-bench
[ -x "$bench" ] || {
  echo "scripts/bench-docs.sh: no $bench (build first, or --build DIR)" >&2
  exit 1
}
for t in "${tables[@]}"; do
  case $t in
  service | learners | ingest | shards)
    [ -x "$build/src/server/chimed" ] || {
      echo "scripts/bench-docs.sh: $t needs $build/src/server/chimed" >&2
      exit 1
    } ;;
  esac
done
[ -z "$out" ] || mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The commands behind each table (arguments after chime-bench).
cmds() {
  if [ -n "$smoke" ]; then
    case $1 in
    ring) echo "ring --json --runs 1 --mib 8 --sizes 65536" ;;
    service) echo "service --json --runs 1 --mib 8 --sizes 1" ;;
    learners) echo "service --json --runs 1 --mib 8 --sizes 1 --only memcpy --learners 1 --seconds 0.2" ;;
    ingest) echo "ingest --json --runs 1 --scale 0.01" ;;
    replay) echo "replay --json --items 1000 --seconds 0.05" ;;
    sequence) echo "sequence --json --steps 1000,4000 --seconds 0.05" ;;
    shards) echo "shards --json --smoke" ;;
    esac
    return
  fi
  case $1 in
  ring) echo "ring --json --runs 3" ;;
  service) echo "service --json --runs 5 --sizes 1,16" ;;
  learners)
    echo "service --json --runs 3 --sizes 1,16 --only memcpy --learners 2 --seconds 2" ;;
  ingest) echo "ingest --json --runs 5" ;;
  shards) echo "shards --json --runs 5" ;;
  replay)
    if [ -n "$long" ]; then
      echo "replay --json --items 10000,1000000,10000000 --selectors fifo,uniform,prioritized,lifo,min_heap,max_heap --seconds 2"
    else
      echo "replay --json --items 10000,1000000 --selectors fifo,uniform,prioritized,lifo,min_heap,max_heap --seconds 1"
    fi ;;
  sequence)
    if [ -n "$long" ]; then
      echo "sequence --json --steps 10000,1000000,3000000 --seconds 3"
      echo "sequence --json --step-bytes 256 --steps 10000,1000000,10000000 --seconds 3"
      echo "sequence --json --no-plain --steps 10000,1000000,10000000 --seconds 3"
    else
      echo "sequence --json --steps 10000,1000000 --seconds 3"
      echo "sequence --json --step-bytes 256 --steps 10000,1000000 --seconds 3"
    fi ;;
  esac
}

# The formatter: JSON lines (stdin) -> one Markdown table; argv[1] the
# table's name.
cat >"$tmp/format.py" <<'PY'
import json, sys

table = sys.argv[1]
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
if not rows:
    sys.exit("scripts/bench-docs.sh: %s: no figures came out" % table)

def count(n):
    """10000 -> 10^4, 3000000 -> 3 x 10^6, else with thousands commas."""
    s = str(n).rstrip("0")
    z = len(str(n)) - len(s)
    if n > 0 and z >= 4 and len(s) == 1:
        return ("10^%d" % z) if s == "1" else ("%s x 10^%d" % (s, z))
    return "{:,}".format(n)

def size(b):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return "%d %s" % (b // k, unit)
    return "%d B" % b

def rng(r, key, f="%.2f"):
    """median (min-max), from a service line's key, key_min, key_max."""
    if key not in r:
        return ""
    return (f + " (" + f + "-" + f + ")") % (r[key], r[key + "_min"], r[key + "_max"])

def md(head, body):
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for b in body:
        print("| " + " | ".join(b) + " |")

if table == "ring":
    md(["batch", "touch", "ring GB/s", "memcpy GB/s", "ring / memcpy",
        "batches/s", "idle wake p50 / p99 us", "loaded p50 / p99 us"],
       [[size(r["batch_bytes"]), "yes" if r["touch"] else "no",
         "%.2f" % r["gbps"], "%.2f" % r["memcpy_gbps"],
         "%.2f" % r["ratio_vs_memcpy"], "{:,.0f}".format(r["batches_per_s"]),
         "%.1f / %.1f" % (r["p50_us"], r["p99_us"]),
         "%.1f / %.1f" % (r["loaded_p50_us"], r["loaded_p99_us"])]
        for r in rows])
elif table == "service":
    md(["case", "batch", "GB/s", "vs memcpy", "vs grpc_plain", "CPU s/GB",
        "CPU vs grpc_plain", "server busy"],
       [[r["case"], size(r["batch_bytes"]), rng(r, "gbps"),
         rng(r, "ratio_vs_memcpy", "%.3f"), rng(r, "ratio_vs_grpc_plain", "%.3f"),
         rng(r, "cpu_s_per_gb", "%.3f"),
         rng(r, "cpu_ratio_vs_grpc_plain", "%.3f"), rng(r, "server_busy")]
        for r in rows if r.get("case") != "learners"])
elif table == "learners":
    md(["batch", "learners", "GB/s all", "shm GB/s", "stream GB/s",
        "chimed threads (before)", "ingest during / alone", "chimed cores",
        "learners cores", "actor cores during / alone"],
       [[size(r["batch_bytes"]),
         "%d shm + %d stream" % (r["learners"], r["learners"])
         if r["learner_modes"] == "both"
         else "%d %s" % (r["learners"], r["learner_modes"]),
         rng(r, "gbps"), "%.2f" % r["shm_gbps"], "%.2f" % r["stream_gbps"],
         "%d (%d)" % (r["chimed_threads"], r["chimed_threads_before"]),
         rng(r, "ingest_ratio_vs_alone", "%.3f"),
         "%.2f" % r["chimed_cpu_cores"],
         "%.2f" % r["learners_cpu_cores"],
         "%.2f / %.2f" % (r["actor_cpu_cores"], r["actor_alone_cpu_cores"])]
        for r in rows if r.get("case") == "learners"])
elif table == "ingest":
    md(["sample", "samples/s", "GB/s", "samples a run"],
       [[size(r["sample_bytes"]), "{:,.0f}".format(r["samples_per_s"]),
         "%.2f" % r["gbps"], "{:,}".format(r["samples"])] for r in rows])
elif table == "replay":
    md(["selector", "items", "insert M/s", "sample M/s",
        "CPU ns a sample (x the smallest)", "floor CPU ns (x the smallest)",
        "CPU vs floor", "mutate M/s"],
       [[r["selector"], count(r["items"]), "%.2f" % (r["insert_per_s"] / 1e6),
         "%.2f" % (r["sample_per_s"] / 1e6),
         "%.0f (%.2fx)" % (r["cpu_ns_per_sample"], r["cpu_cost_vs_smallest"]),
         "%.0f (%.2fx)" % (r["floor_cpu_ns_per_sample"],
                           r["floor_cpu_cost_vs_smallest"]),
         "%.2f" % r["cpu_vs_floor"],
         "-" if r["mutate_per_s"] is None else "%.2f" % (r["mutate_per_s"] / 1e6)]
        for r in rows])
elif table == "shards":
    def case(r):
        if r["case"] == "writers":
            return "%d writers, %d B samples" % (r["writers"], r["sample_bytes"])
        return "batch %d x %s" % (r["batch_size"], size(r["sample_bytes"]))
    def measured(r):
        if r["case"] == "learner":
            return ("1 learner over %d shards %s / %d learners one per shard %s samples/s"
                    " (unsharded: %s; learner cores %.2f / %.2f, chimed cores %.2f / %.2f)"
                    % (r["shards"], "{:,.0f}".format(r["sharded_samples_per_s"]),
                       r["shards"], "{:,.0f}".format(r["direct_samples_per_s"]),
                       "{:,.0f}".format(r["unsharded_samples_per_s"]),
                       r["sharded_learner_cpu_cores"], r["direct_learners_cpu_cores"],
                       r["sharded_chimed_cpu_cores"], r["direct_chimed_cpu_cores"])
                    + ("; samples per CPU second, ratio %s" % rng(r, "ratio_per_cpu", "%.3f")
                       if "ratio_per_cpu" in r else ""))
        if r["case"] == "cpu":
            return ("learner CPU ns a sample, over %d shards %.1f / unsharded %.1f"
                    " (with the chimeds': %.1f / %.1f, ratio %s)"
                    % (r["shards"], r["sharded_cpu_ns_per_sample"],
                       r["unsharded_cpu_ns_per_sample"],
                       r["sharded_all_cpu_ns_per_sample"],
                       r["unsharded_all_cpu_ns_per_sample"],
                       rng(r, "all_cpu_ratio", "%.3f")))
        return ("samples/s on a sharded client %s / bound to the shards %s"
                " (one writer on one shard: %s; spread %s)"
                % ("{:,.0f}".format(r["sharded_samples_per_s"]),
                   "{:,.0f}".format(r["direct_samples_per_s"]),
                   "{:,.0f}".format(r["one_writer_samples_per_s"]),
                   "even" if r["even"] else "UNEVEN"))
    def ratio(r):
        return rng(r, "cpu_ratio" if r["case"] == "cpu" else "ratio", "%.3f")
    md(["case", "what", "ratio", "target", "figures (medians)"],
       [[r["case"], case(r), ratio(r),
         ("<= %g" if r["case"] == "cpu" else ">= %g") % r["target"], measured(r)]
        for r in rows])
elif table == "sequence":
    def plain(r, s):
        return s if r["plain_items"] > 0 else "-"
    md(["step", "steps stored", "fill M steps/s", "write M steps/s (GB/s)",
        "windows/s", "GB/s into the slot", "plain GB/s", "vs plain",
        "CPU vs plain", "CPU us a window (x the smallest)",
        "floor CPU us (x the smallest)", "CPU vs floor"],
       [[size(r["step_bytes"]), count(r["steps"]),
         "%.2f" % (r["fill_steps_per_s"] / 1e6),
         "%.2f (%.2f)" % (r["write_steps_per_s"] / 1e6, r["write_gb_s"]),
         "{:,.0f}".format(r["windows_per_s"]), "%.2f" % r["sample_gb_s"],
         plain(r, "%.2f" % r["plain_gb_s"]), plain(r, "%.2f" % r["vs_plain"]),
         plain(r, "%.2f" % r["cpu_vs_plain"]),
         "%.2f (%.2fx)" % (r["cpu_ns_per_window"] / 1e3,
                           r["cpu_cost_vs_smallest"]),
         "%.2f (%.2fx)%s" % (r["floor_cpu_ns_per_window"] / 1e3,
                             r["floor_cpu_cost_vs_smallest"],
                             "" if r["floor_in_turns"] else ", after"),
         "%.2f" % r["cpu_vs_floor"]]
        for r in rows])
PY

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit + changes"
for t in "${tables[@]}"; do
  : >"$tmp/$t.json"
  load0=$(cut -d' ' -f1 /proc/loadavg)
  mapfile -t lines < <(cmds "$t")
  for c in "${lines[@]}"; do
    echo "scripts/bench-docs.sh: $t: chime-bench $c" >&2
    # shellcheck disable=SC2086 # the arguments are words on purpose
    "$bench" $c >>"$tmp/$t.json"
  done
  load1=$(cut -d' ' -f1 /proc/loadavg)
  [ -z "$out" ] || cp "$tmp/$t.json" "$out/$t.json"
  run=()
  for c in "${lines[@]}"; do run+=("\`chime-bench $c\`"); done
  joined=$(printf '%s; ' "${run[@]}")
  echo "Produced by \`scripts/bench-docs.sh${long:+ --long}${smoke:+ --smoke} $t\`" \
    "($(nproc) cores, load $load0 to $load1, $(date -u +%Y-%m-%d)," \
    "commit $commit): ${joined%; }."
  echo
  python3 "$tmp/format.py" "$t" <"$tmp/$t.json"
  echo
done
