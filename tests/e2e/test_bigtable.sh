#!/bin/bash
# A table in files four times its memory limit: chime-bench bigtable under a
# 256 MiB memory cgroup with a 1 GiB table (scripts/bigtable.sh at a small
# size): not killed, every sample whole, draws uniform (chi-square), the
# cgroup's OOM count 0. Skips (77) where no memory cgroup can be made.
set -u
BUILD=${CHIME_BUILD_DIR:?}
SRC=${CHIME_SOURCE_DIR:?}
DIR=$(mktemp -d /var/tmp/chime-bigtable-test-XXXXXX) || exit 1
trap 'rm -rf "$DIR"' EXIT
out=$(BUILD=$BUILD LIMIT=256M GIB=1 sh "$SRC/scripts/bigtable.sh" "$DIR/data" \
  --seconds 1 --rounds 1 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: chime-bench bigtable exited $rc"; exit 1; }
echo "$out" | grep -q "bad samples 0" || { echo "FAIL: bad samples"; exit 1; }
echo "$out" | grep -q "oom_kill 0 " || { echo "FAIL: OOM kill in the cgroup"; exit 1; }
echo PASS
