# What the shell tests share (tests/e2e/test_*.sh source it after setting
# src=$CHIME_SOURCE_DIR and test_name=<their name>).

fail() {
  echo "$test_name: $*" >&2
  exit 1
}

run_logged() { # log, command...: runs it, shows the log when it fails
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    fail "failed: $*"
  fi
}

# dynamic FILE: its dynamic section into the variable dyn. Read whole, then
# matched (grep -q <<<"$dyn"): `readelf | grep -q` under pipefail fails when
# grep exits at its match before readelf has written the rest (SIGPIPE,
# 141), whatever the match said (tests/support/check_pipes.sh).
dynamic() {
  dyn=$(readelf -d "$1") || fail "readelf -d $1 failed"
}

# The C library's version, as include/chime/version.h says.
chime_version() {
  sed -n 's/^#define CHIME_VERSION_STRING "\(.*\)"$/\1/p' \
    "$src/include/chime/version.h"
}
