#!/usr/bin/env bash
# Runs python/tests: the `chime` extension from a build tree against real
# chimed processes. Needs a build with CHIME_PYTHON=ON.
# Usage: [BUILD=build] scripts/pytest.sh [PYTEST_ARGS...]
# Debian's python3 is used (CHIME_PYTHON overrides it): the extension is
# built for it, and python3-numpy / python3-pytest are installed for it.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD:-build}
python=${CHIME_PYTHON:-/usr/bin/python3}
if ! compgen -G "$build/python/chime/_chime.*.so" >/dev/null; then
  echo "scripts/pytest.sh: $build/python has no chime module (configure with -DCHIME_PYTHON=ON)" >&2
  exit 1
fi

rc=0
PYTHONPATH=$build/python CHIMED=$build/src/server/chimed \
  PYTHONDONTWRITEBYTECODE=1 timeout -k 10 300 \
  "$python" -m pytest -p no:cacheprovider -q python/tests "$@" || rc=$?
case $rc in
0) ;;
5) echo "scripts/pytest.sh: pytest ran no test" >&2; exit 1 ;;
124 | 137) echo "scripts/pytest.sh: timed out after 300 s" >&2; exit 1 ;;
*) exit "$rc" ;;
esac
