#!/usr/bin/env bash
# The Debian packages as a user gets them (CI: a fresh Debian 12, as root):
#   - scripts/package.sh makes libchime0.X (X: version.h's minor), libchime-dev, chimed and
#     python3-chime from this build dir (cpack -G DEB);
#   - apt-get install ./*.deb installs them; chimed.service passes
#     systemd-analyze verify (when there is one) and /etc/chime/chimed.json
#     is a conffile;
#   - README.md's C quickstart, built with plain `pkg-config chime`, runs
#     against the installed chimed started with the installed config (shm
#     mode through /run/chime/handoff.sock, as under systemd);
#   - README.md's Python quickstart runs with Debian's python3 and nothing
#     on PYTHONPATH: the packaged module, ensure_server finding
#     /usr/bin/chimed on PATH; chime.__version__ is version.h's;
#   - pip install --user --break-system-packages --no-build-isolation
#     ./python builds the module against the installed libchime-dev
#     (pkg-config) and that module runs the quickstart too;
#   - apt-get purge leaves nothing: no file of the packages' dpkg -L lists,
#     no /usr/include/chime, /etc/chime, libchime*, chime module.
# Skips (77) unless root with apt-get and dpkg-deb, or when one of the
# packages is installed already (it is not this test's to remove).
# Run by CTest (label packages, serial) with CHIME_BUILD_DIR and
# CHIME_SOURCE_DIR.
set -euo pipefail

build=${CHIME_BUILD_DIR:?}
src=${CHIME_SOURCE_DIR:?}
test_name=test_packages
# shellcheck source=../support/shtest.sh
. "$src/tests/support/shtest.sh"
# The runtime package carries the soname's version: the major alone from
# 1.0 on (libchime.so.1 in libchime1), major.minor for a 0.x.
abi=$(chime_version | cut -d. -f1)
[ "$abi" = 0 ] && abi=$(chime_version | cut -d. -f1,2)
pkgs=("libchime$abi" libchime-dev chimed python3-chime)

skip() {
  echo "test_packages: $*, skipping" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root"
for tool in apt-get dpkg dpkg-deb cpack pkg-config readelf; do
  command -v "$tool" >/dev/null || skip "$tool not found"
done
for p in "${pkgs[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *installed* ]]; then
    skip "$p is installed already"
  fi
done
[ ! -e /etc/chime ] || skip "/etc/chime exists already"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-packages.XXXXXX")
chimed_pid=""
made_run_dir=""
installed=""
export DEBIAN_FRONTEND=noninteractive
# Another apt on the machine: wait for it rather than fail.
apt=(apt-get -y -q -o DPkg::Lock::Timeout=120)
purge() {
  "${apt[@]}" purge "${pkgs[@]}" >"$tmp/purge.log" 2>&1
}
cleanup() {
  if [ -n "$chimed_pid" ]; then
    kill "$chimed_pid" 2>/dev/null || true
    wait "$chimed_pid" 2>/dev/null || true
  fi
  [ -z "$made_run_dir" ] || rm -rf /run/chime
  # A failed run leaves the machine as it found it too.
  [ -z "$installed" ] || purge || cat "$tmp/purge.log" >&2
  rm -rf "$tmp"
}
trap cleanup EXIT
version=$(chime_version)

echo "== scripts/package.sh"
run_logged "$tmp/package.log" "$src/scripts/package.sh" "$build" "$tmp/debs"
for p in "${pkgs[@]}"; do
  compgen -G "$tmp/debs/${p}_${version}_*.deb" >/dev/null ||
    fail "no ${p}_${version} package: $(ls "$tmp/debs")"
done
conffiles=$(dpkg-deb --info "$tmp"/debs/chimed_*.deb conffiles) ||
  fail "chimed has no conffiles"
[ "$conffiles" = /etc/chime/chimed.json ] ||
  fail "chimed's conffiles: $conffiles"

echo "== apt-get install ./*.deb"
installed=1
run_logged "$tmp/install.log" "${apt[@]}" install --no-install-recommends \
  "$tmp"/debs/*.deb
for p in "${pkgs[@]}"; do
  dpkg -L "$p" >"$tmp/$p.list" || fail "$p is not installed"
done
for f in /usr/bin/chimed /usr/bin/chimectl /usr/bin/chime-actor \
  /usr/bin/chime-learner /usr/include/chime/chime.h /etc/chime/chimed.json \
  /usr/lib/systemd/system/chimed.service \
  /usr/share/chime/grafana/chime.json; do
  [ -e "$f" ] || fail "$f is not installed"
done
grep -qx 'ExecStart=/usr/bin/chimed --config /etc/chime/chimed.json' \
  /usr/lib/systemd/system/chimed.service ||
  fail "chimed.service does not run /usr/bin/chimed"
if command -v systemd-analyze >/dev/null; then
  # Only the unit's own problems (a bad key or value, an ExecStart that is
  # not there): without a running systemd, verify may also complain about
  # the system and units it pulls in.
  systemd-analyze verify /usr/lib/systemd/system/chimed.service \
    >"$tmp/verify.log" 2>&1 || true
  if grep -q 'chimed.service' "$tmp/verify.log"; then
    cat "$tmp/verify.log" >&2
    fail "systemd-analyze verify chimed.service"
  fi
  echo "systemd-analyze verify: $(wc -l <"$tmp/verify.log") lines, none about chimed.service"
fi
[ "$(pkg-config --modversion chime)" = "$version" ] ||
  fail "pkg-config --modversion chime: $(pkg-config --modversion chime)"

echo "== README's C quickstart with pkg-config chime"
awk '/^## Quickstart in C/ { q = 1 } q && /^```c/ { f = 1; next }
     f && /^```/ { exit } f' "$src/README.md" >"$tmp/app.c"
read -r -a pcout <<<"$(pkg-config --cflags --libs chime)"
run_logged "$tmp/cc.log" cc -std=c11 -Wall -Wextra -Werror "$tmp/app.c" \
  "${pcout[@]}" -o "$tmp/app"
dynamic "$tmp/app"
grep -q "NEEDED.*\[libchime.so.$abi\]" <<<"$dyn" ||
  fail "app does not load libchime.so.$abi"

echo "== the installed chimed with /etc/chime/chimed.json"
# systemd makes /run/chime (RuntimeDirectory=chime); here nothing does.
if [ ! -d /run/chime ]; then
  mkdir -p /run/chime
  made_run_dir=1
fi
# The files exist before chimed starts: the background child opens its
# redirections in its own time, and a read of a file not there yet would
# end this script (set -e, pipefail) on a busy machine.
: >"$tmp/chimed.out"
: >"$tmp/chimed.err"
/usr/bin/chimed --config /etc/chime/chimed.json --listen 127.0.0.1:0 \
  >>"$tmp/chimed.out" 2>>"$tmp/chimed.err" &
chimed_pid=$!
addr=""
for _ in $(seq 100); do
  addr=$(sed -n 's/^listening on //p' "$tmp/chimed.out" | head -n1)
  [ -n "$addr" ] && break
  kill -0 "$chimed_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$addr" ] || fail "the installed chimed did not start: $(cat "$tmp/chimed.err")"
[ -S /run/chime/handoff.sock ] || fail "no /run/chime/handoff.sock"
out=$("$tmp/app" "$addr" 2>&1) || fail "app: $out"
[ "$out" = "4 batches of 256 samples, shm mode" ] || fail "app printed: $out"
echo "app: $out"
out=$(/usr/bin/chimectl info "$addr" 2>&1) || fail "chimectl info: $out"
kill -TERM "$chimed_pid"
st=0
wait "$chimed_pid" || st=$?
chimed_pid=""
[ "$st" = 0 ] || fail "chimed exited with $st: $(cat "$tmp/chimed.err")"

echo "== README's Python quickstart, python3-chime"
awk '/^## Python/ { q = 1 } q && /^```python/ { f = 1; next }
     f && /^```/ { exit } f' "$src/README.md" >"$tmp/quickstart.py"
grep -q ensure_server "$tmp/quickstart.py" ||
  fail "no ensure_server under README's Python"
mkdir -p "$tmp/cwd"
pyrun() { # label, env...: the quickstart and the module's facts
  local label=$1
  shift
  # Bytecode is written, as for any user importing it as root: purge must
  # remove the __pycache__ that leaves in the package's directory.
  (cd "$tmp/cwd" && env -u PYTHONPATH -u CHIMED -u PYTHONDONTWRITEBYTECODE \
    CHIME_RUN_DIR="$tmp/run" "$@" timeout 120 /usr/bin/python3 -c '
import runpy, sys, chime
print("module", chime.__file__, chime._chime.__file__)
print("version", chime.__version__)
runpy.run_path(sys.argv[1])' "$tmp/quickstart.py") >"$tmp/py.out" 2>&1 ||
    {
      cat "$tmp/py.out" >&2
      fail "$label: the Python quickstart failed"
    }
  grep -qx "version $version" "$tmp/py.out" ||
    fail "$label: chime.__version__ is not $version: $(cat "$tmp/py.out")"
  [ "$(grep -c '^shm (256, 64) ' "$tmp/py.out")" = 4 ] ||
    fail "$label: not 4 shm batches: $(cat "$tmp/py.out")"
  pymod=$(sed -n 's/^module //p' "$tmp/py.out")
  echo "$label: $pymod"
}
pyrun python3-chime
case $pymod in
/usr/lib/python3/dist-packages/chime/__init__.py\ *) ;;
*) fail "python3-chime: chime imported from $pymod" ;;
esac

echo "== pip install --user ./python against libchime-dev"
cp -r "$src/python" "$tmp/pysrc"
rm -rf "$tmp/pysrc/build" "$tmp/pysrc"/*.egg-info
user=$tmp/user
# Not the build tree (ctest sets CHIME_BUILD_DIR): libchime-dev.
run_logged "$tmp/pip.log" env -u CHIME_BUILD_DIR HOME="$tmp" PYTHONUSERBASE="$user" \
  /usr/bin/python3 -m pip install --user --break-system-packages \
  --no-build-isolation --no-index "$tmp/pysrc"
pyrun "pip --user" PYTHONUSERBASE="$user"
case $pymod in
"$user"/*) ;;
*) fail "pip --user: chime imported from $pymod" ;;
esac
so=${pymod#* }
dynamic "$so"
grep -q "NEEDED.*\[libchime.so.$abi\]" <<<"$dyn" ||
  fail "the pip-built module does not load libchime.so.$abi"

echo "== apt-get purge"
installed=""
purge || {
  cat "$tmp/purge.log" >&2
  fail "apt-get purge failed"
}
for p in "${pkgs[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *installed* ]]; then
    fail "$p is still installed"
  fi
  while read -r f; do
    # Directories other packages share (/usr, /usr/lib, ...) stay.
    [ -d "$f" ] && [ ! -L "$f" ] && continue
    if [ -e "$f" ] || [ -L "$f" ]; then
      fail "$f ($p) is left after purge"
    fi
  done <"$tmp/$p.list"
done
for d in /usr/include/chime /etc/chime /usr/lib/cmake/chime \
  /usr/lib/python3/dist-packages/chime /var/lib/chime; do
  [ ! -e "$d" ] || fail "$d is left after purge"
done
left=$(find /usr/lib /usr/bin -name 'libchime*' -o -name 'chime*.pc' \
  -o -name 'chimed*' 2>/dev/null || true)
[ -z "$left" ] || fail "left after purge: $left"
echo "test_packages: OK"
