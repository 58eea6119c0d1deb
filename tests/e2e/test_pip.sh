#!/usr/bin/env bash
# pip install ./python as README.md says, against this build tree
# (CHIME_BUILD_DIR: libchime.a linked in), with Debian's packages only: a
# venv made with --system-site-packages (numpy from Debian), no package
# index (--no-index --no-build-isolation). Then, in that venv, from a
# directory outside the tree and with nothing on PYTHONPATH: the module is
# the venv's, chime.__version__ is include/chime/version.h's, the module
# loads no libchime.so, and README.md's Python quickstart runs with
# ensure_server finding chimed on PATH (no $CHIMED, no build tree beside
# the package). Skips (77) without python3's venv or pip.
# Run by CTest (labels install, python) with CHIME_BUILD_DIR and
# CHIME_SOURCE_DIR.
set -euo pipefail

build=${CHIME_BUILD_DIR:?}
src=${CHIME_SOURCE_DIR:?}
test_name=test_pip
# shellcheck source=../support/shtest.sh
. "$src/tests/support/shtest.sh"
python=${CHIME_PYTHON:-/usr/bin/python3}

"$python" -c 'import ensurepip, venv' 2>/dev/null ||
  { echo "test_pip: no python3-venv, skipping" >&2; exit 77; }
"$python" -m pip --version >/dev/null 2>&1 ||
  { echo "test_pip: no python3-pip, skipping" >&2; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
version=$(chime_version)

# A copy: pip builds in the source directory (build/, *.egg-info).
cp -r "$src/python" "$tmp/pysrc"
rm -rf "$tmp/pysrc/build" "$tmp/pysrc"/*.egg-info
run_logged "$tmp/venv.log" "$python" -m venv --system-site-packages \
  "$tmp/venv"
run_logged "$tmp/pip.log" env CHIME_BUILD_DIR="$build" \
  "$tmp/venv/bin/python" -m pip install --no-index --no-build-isolation \
  "$tmp/pysrc"

awk '/^## Python/ { q = 1 } q && /^```python/ { f = 1; next }
     f && /^```/ { exit } f' "$src/README.md" >"$tmp/quickstart.py"
grep -q ensure_server "$tmp/quickstart.py" ||
  fail "no ensure_server under README's Python"
mkdir -p "$tmp/cwd" "$tmp/bin"
ln -s "$(readlink -f "$build/src/server/chimed")" "$tmp/bin/chimed"
(cd "$tmp/cwd" && env -u PYTHONPATH -u CHIMED PATH="$tmp/bin:$PATH" \
  CHIME_RUN_DIR="$tmp/run" PYTHONDONTWRITEBYTECODE=1 \
  timeout 120 "$tmp/venv/bin/python" -c '
import os, runpy, sys, chime
print("module", chime.__file__, chime._chime.__file__)
print("version", chime.__version__)
print("build", os.path.exists(os.path.join(os.path.dirname(chime.__file__), "_build.py")))
runpy.run_path(sys.argv[1])' "$tmp/quickstart.py") >"$tmp/py.out" 2>&1 || {
  cat "$tmp/py.out" >&2
  fail "the Python quickstart failed in the venv"
}
cat "$tmp/py.out"
read -r init so < <(sed -n 's/^module //p' "$tmp/py.out")
case $init in
"$tmp/venv/lib/"*/site-packages/chime/__init__.py) ;;
*) fail "chime imported from $init, not the venv" ;;
esac
grep -qx "version $version" "$tmp/py.out" ||
  fail "chime.__version__ is not $version"
grep -qx "build False" "$tmp/py.out" || fail "the venv's chime has a _build.py"
[ "$(grep -c '^shm (256, 64) ' "$tmp/py.out")" = 4 ] ||
  fail "not 4 shm batches"
dynamic "$so"
if grep -q 'NEEDED.*libchime' <<<"$dyn"; then
  fail "the module built against the tree loads libchime.so"
fi
echo "test_pip: OK"
