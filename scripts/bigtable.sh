#!/bin/sh
# chime-bench bigtable in a memory cgroup (v1, as on these machines; root):
# a table in files of GIB GiB (default 4) under a LIMIT (default 1G) memory
# limit, filled once into DIR and then sampled against a pread loop over
# its file (docs/operations.md, "Tables in files"). Prints the bench's
# figures, then the cgroup's: its limit, the most it used, and whether
# anything in it was OOM-killed. Exits 77 (skipped) without a memory cgroup.
#   scripts/bigtable.sh [DIR] [chime-bench bigtable options...]
#   BUILD=build LIMIT=1G GIB=4 scripts/bigtable.sh /var/tmp/chime-bigtable
set -eu
BUILD=${BUILD:-build}
LIMIT=${LIMIT:-1G}
GIB=${GIB:-4}
DIR=${1:-/var/tmp/chime-bigtable}
[ $# -gt 0 ] && shift
CG=/sys/fs/cgroup/memory/chime-bigtable-$$
if ! mkdir "$CG" 2>/dev/null; then
  echo "skipped: cannot make a memory cgroup at $CG (cgroup v1 and root needed)"
  exit 77
fi
trap 'rmdir "$CG" 2>/dev/null || true' EXIT
echo "$LIMIT" >"$CG/memory.limit_in_bytes"
rc=0
sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$CG" \
  "$BUILD/bench/chime-bench" bigtable --dir "$DIR" --gib "$GIB" "$@" || rc=$?
echo "cgroup: limit $(cat "$CG/memory.limit_in_bytes") B, max usage" \
  "$(cat "$CG/memory.max_usage_in_bytes") B, hit the limit" \
  "$(cat "$CG/memory.failcnt") times, $(grep oom_kill "$CG/memory.oom_control" |
    tr '\n' ' '); chime-bench exit $rc"
exit $rc
