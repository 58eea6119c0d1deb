#!/usr/bin/env bash
# Runs tests/interop: chimed driven by a Python client that pytest generates
# from proto/chime.proto alone (protoc + grpc_python_plugin), as a user of
# another language would. Needs what scripts/setup installs.
# Usage: [CHIMED=path] scripts/interop.sh [PYTEST_ARGS...]
#        (CHIMED defaults to build/src/server/chimed)
# Debian's python3 is used (CHIME_PYTHON overrides it): python3-grpcio and
# python3-protobuf are installed for it, not for a python3 from pyenv or a
# venv that may come first in PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

chimed=${CHIMED:-build/src/server/chimed}
python=${CHIME_PYTHON:-/usr/bin/python3}

rc=0
CHIMED=$chimed PYTHONDONTWRITEBYTECODE=1 timeout -k 10 300 \
  "$python" -m pytest -p no:cacheprovider -q tests/interop "$@" || rc=$?
case $rc in
0) ;;
5) # pytest collected no test: fine only if there is none to collect
  if compgen -G 'tests/interop/test_*.py' >/dev/null; then
    echo "scripts/interop.sh: pytest ran no test, but tests/interop has some" >&2
    exit 1
  fi
  echo "scripts/interop.sh: no interop tests" ;;
124 | 137) echo "scripts/interop.sh: timed out after 300 s" >&2; exit 1 ;;
*) exit "$rc" ;;
esac
