#!/usr/bin/env bash
# Builds chime's Debian packages with CPack (cmake/packaging.cmake):
# libchime1, libchime-dev, chimed (with chimed.service and
# /etc/chime/chimed.json) and python3-chime (when the build has
# CHIME_PYTHON on), all for the prefix /usr.
# Usage: scripts/package.sh [BUILD_DIR [OUT_DIR]]
#   BUILD_DIR (default build) is configured (Release, unless it already is
#   configured) and built first (all of it: cpack's preinstall step would
#   build it anyway); the .deb files go to OUT_DIR (default
#   BUILD_DIR/packages). Install them with: apt-get install ./OUT_DIR/*.deb
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
out=${2:-$build/packages}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
# CPack stages and writes in OUT_DIR/_cpack (its -B); the packages are
# moved to OUT_DIR itself.
(cd "$build" && cpack -G DEB -B "$out/_cpack" >"$out/cpack.log" 2>&1) || {
  cat "$out/cpack.log" >&2
  echo "scripts/package.sh: cpack failed" >&2
  exit 1
}
mv "$out"/_cpack/*.deb "$out"/
rm -rf "$out/_cpack"
ls "$out"/*.deb
