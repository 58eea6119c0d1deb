#!/usr/bin/env bash
# Installs the build into a scratch prefix the way a user would
# (cmake --install build --prefix P) and checks what a C user gets there:
#   - the layout: bin/ tools, include/chime/, libchime.so + .a, chime.pc,
#     chime-static.pc, lib/cmake/chime/;
#   - public headers that include nothing but the C library and each other,
#     a chime.h without the ring's calls, and no ring producer call public;
#   - a libchime.so that exports exactly the CHIME_EXTERN functions;
#   - README.md's quickstart (its C block, taken from the README so the two
#     cannot drift) built with pkg-config (chime, chime-static, and
#     pkg-config --static against a prefix holding only libchime.a) and with
#     find_package(chime) (chime::chime, chime::chime_static);
#   - every one of those programs run against the installed chimed.
# Run by CTest (label install) with CHIME_BUILD_DIR, CHIME_SOURCE_DIR,
# CHIME_INSTALL_LIBDIR, CC, CMAKE and CHIME_TEST_CFLAGS (sanitizer flags of
# the build, which programs linking it need too).
set -euo pipefail

build=${CHIME_BUILD_DIR:?}
src=${CHIME_SOURCE_DIR:?}
test_name=test_install
# shellcheck source=../support/shtest.sh
. "$src/tests/support/shtest.sh"
libdir=${CHIME_INSTALL_LIBDIR:-lib}
cc=${CC:-cc}
cmake=${CMAKE:-cmake}
read -r -a cflags <<<"${CHIME_TEST_CFLAGS:-}"

for tool in pkg-config readelf nm; do
  if ! command -v "$tool" >/dev/null; then
    echo "test_install: $tool not found, skipping" >&2
    exit 77
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chime-install.XXXXXX")
chimed_pid=""
cleanup() {
  if [ -n "$chimed_pid" ]; then
    kill "$chimed_pid" 2>/dev/null || true
    wait "$chimed_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

prefix=$tmp/prefix
echo "== cmake --install $build --prefix $prefix"
run_logged "$tmp/install.log" "$cmake" --install "$build" --prefix "$prefix"

echo "== layout"
for f in bin/chimed bin/chimectl bin/chime-actor bin/chime-learner \
  include/chime/chime.h include/chime/ring.h include/chime/spec.h \
  include/chime/errors.h include/chime/version.h \
  "$libdir/libchime.a" "$libdir/libchime.so" \
  "$libdir/pkgconfig/chime.pc" "$libdir/pkgconfig/chime-static.pc" \
  "$libdir/cmake/chime/chimeConfig.cmake" \
  "$libdir/cmake/chime/chimeConfigVersion.cmake"; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
for b in chimed chimectl chime-actor chime-learner; do
  [ -x "$prefix/bin/$b" ] || fail "bin/$b is not executable"
done
so=$(readlink -f "$prefix/$libdir/libchime.so")
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -e "$prefix/$libdir/$soname" ] ||
  fail "libchime.so has no SONAME link ($soname)"
# While the version is 0.x a minor release may break the ABI: the soname
# carries the minor version, so a program built against 0.1 never loads 0.2.
vh="$prefix/include/chime/version.h"
major=$(sed -n 's/^#define CHIME_VERSION_MAJOR \([0-9]*\)$/\1/p' "$vh")
minor=$(sed -n 's/^#define CHIME_VERSION_MINOR \([0-9]*\)$/\1/p' "$vh")
want=libchime.so.$major
[ "$major" = 0 ] && want=libchime.so.0.$minor
[ "$soname" = "$want" ] || fail "soname $soname, expected $want"

echo "== public headers"
# Only the C library and each other: no src/ header, no gRPC, no protobuf.
bad=$(grep -h '^[[:space:]]*#[[:space:]]*include' "$prefix"/include/chime/*.h |
  grep -vE '#[[:space:]]*include[[:space:]]+(<std(def|int)\.h>|"chime/[a-z]+\.h")' ||
  true)
[ -z "$bad" ] || fail "a public header includes more than it may: $bad"
for h in "$prefix"/include/chime/*.h; do
  printf '#include <chime/%s>\ntypedef int nonempty;\n' "$(basename "$h")" \
    >"$tmp/hdr.c"
  run_logged "$tmp/hdr.log" "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror \
    -fsyntax-only -I"$prefix/include" "$tmp/hdr.c"
done
# What each header declares (comments dropped by the preprocessor): the
# client API has the spec and no ring calls (those are ring.h's, for
# programs that use rings directly), and no public header has a producer
# call (only chime produces into a ring).
declares() { # header -> its preprocessed text in $tmp/decl.i
  printf '#include <chime/%s>\n' "$1" >"$tmp/decl.c"
  run_logged "$tmp/decl.log" "$cc" -std=c11 -E -I"$prefix/include" \
    "$tmp/decl.c" -o "$tmp/decl.i"
}
declares chime.h
grep -qw chime_spec_parse "$tmp/decl.i" || fail "chime/chime.h lacks the spec"
if grep -qw chime_ring_attach "$tmp/decl.i"; then
  fail "chime/chime.h declares the ring's calls (chime_ring_attach)"
fi
declares ring.h
grep -qw chime_ring_attach "$tmp/decl.i" || fail "chime/ring.h lacks attach"
producer='chime_ring_(create|acquire|try_acquire|publish|abandon|shutdown|reclaim|unreleased|bytes)'
if grep -qwE "$producer" "$tmp/decl.i"; then
  fail "chime/ring.h declares a producer call: $(grep -owE "$producer" "$tmp/decl.i" | head -n1)"
fi

echo "== exported symbols"
nm -D --defined-only "$so" | awk '{print $3}' | sort >"$tmp/exported"
for h in "$prefix"/include/chime/*.h; do
  tr '\n' ' ' <"$h"
done | grep -oP 'CHIME_EXTERN[^;(]*?\bchime_\w+(?=\s*\()' |
  grep -oP 'chime_\w+$' | sort -u >"$tmp/declared"
[ -s "$tmp/declared" ] || fail "no CHIME_EXTERN declaration found"
if ! diff -u "$tmp/declared" "$tmp/exported" >"$tmp/symdiff"; then
  cat "$tmp/symdiff" >&2
  fail "libchime.so exports other than the CHIME_EXTERN functions (- declared only, + exported only)"
fi
echo "$(wc -l <"$tmp/exported") symbols, all declared in include/chime/"

echo "== README quickstart with pkg-config"
awk '/^## Quickstart in C/ { q = 1 } q && /^```c/ { f = 1; next }
     f && /^```/ { exit } f' "$src/README.md" >"$tmp/app.c"
grep -q 'int main' "$tmp/app.c" || fail "no C program under README's Quickstart"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
warn=(-std=c11 -Wall -Wextra -Werror)
pc() { # pkg-config args... -> words in the array pcout
  local out
  out=$(pkg-config "$@") || fail "pkg-config $* failed"
  read -r -a pcout <<<"$out"
}
# Shared: what README says, with the rpath a prefix outside the loader's
# path needs.
pc --cflags --libs chime
run_logged "$tmp/cc.log" "$cc" "${cflags[@]}" "${warn[@]}" "$tmp/app.c" \
  "${pcout[@]}" -Wl,-rpath,"$prefix/$libdir" -o "$tmp/app_pc"
dynamic "$tmp/app_pc"
grep -q "NEEDED.*\[$soname\]" <<<"$dyn" ||
  fail "app_pc does not load $soname"
# chime-static: libchime.a, the dependencies shared.
pc --cflags --libs chime-static
run_logged "$tmp/cc.log" "$cc" "${cflags[@]}" "${warn[@]}" "$tmp/app.c" \
  "${pcout[@]}" -o "$tmp/app_pc_static"
dynamic "$tmp/app_pc_static"
if grep -q 'NEEDED.*libchime' <<<"$dyn"; then
  fail "app_pc_static loads libchime.so"
fi
# pkg-config --static: what Requires.private / Libs.private add must be
# enough for libchime.a alone (a prefix without the shared library).
static_only=$tmp/static-only
mkdir -p "$static_only/lib"
cp "$prefix/$libdir/libchime.a" "$static_only/lib/"
pc --static --libs chime
# Matched in the shell, no pipe: `printf ... | grep -qx` failed 1 run in
# ~150 (grep exits at -lgrpc, the 3rd of ~115 words; printf, still
# writing, dies of SIGPIPE and pipefail fails the check).
words=" ${pcout[*]} "
for l in -lgrpc -lgpr -lprotobuf-c -luv -ljansson -lpthread -ldl; do
  [[ $words == *" $l "* ]] || fail "pkg-config --static --libs chime lacks $l"
done
pc --define-variable=prefix="$static_only" --define-variable=libdir="$static_only/lib" \
  --cflags --static --libs chime
run_logged "$tmp/cc.log" "$cc" "${cflags[@]}" "${warn[@]}" \
  -I"$prefix/include" "$tmp/app.c" "${pcout[@]}" -o "$tmp/app_pc_static_only"

echo "== README quickstart with find_package(chime)"
mkdir -p "$tmp/proj"
cp "$tmp/app.c" "$tmp/proj/app.c"
cat >"$tmp/proj/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(chime_quickstart C)
find_package(chime @ABI@ REQUIRED COMPONENTS shared static)
add_executable(app_cmake app.c)
target_link_libraries(app_cmake PRIVATE chime::chime)
add_executable(app_cmake_static app.c)
target_link_libraries(app_cmake_static PRIVATE chime::chime_static)
EOF
# The version asked for is the installed one (chime is 0.x: same minor).
sed -i "s/@ABI@/$major.$minor/" "$tmp/proj/CMakeLists.txt"
run_logged "$tmp/cmake.log" "$cmake" -S "$tmp/proj" -B "$tmp/proj/build" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${CHIME_TEST_CFLAGS:-}"
run_logged "$tmp/cmake.log" "$cmake" --build "$tmp/proj/build"
dynamic "$tmp/proj/build/app_cmake"
grep -q "NEEDED.*\[$soname\]" <<<"$dyn" ||
  fail "app_cmake (chime::chime) does not load $soname"
dynamic "$tmp/proj/build/app_cmake_static"
if grep -q 'NEEDED.*libchime' <<<"$dyn"; then
  fail "app_cmake_static (chime::chime_static) loads libchime.so"
fi

echo "== run them against the installed chimed"
# The files exist first: the background child opens its redirections in
# its own time, and reading one not there yet ends this script (set -e).
: >"$tmp/chimed.out"
: >"$tmp/chimed.err"
"$prefix/bin/chimed" --listen 127.0.0.1:0 >>"$tmp/chimed.out" 2>>"$tmp/chimed.err" &
chimed_pid=$!
addr=""
for _ in $(seq 100); do
  addr=$(sed -n 's/^listening on //p' "$tmp/chimed.out" | head -n1)
  [ -n "$addr" ] && break
  kill -0 "$chimed_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$addr" ]; then
  cat "$tmp/chimed.err" >&2
  fail "the installed chimed did not start"
fi
# The table is fifo and each run reads what it inserted: 1024 samples.
for app in "$tmp/app_pc" "$tmp/app_pc_static" "$tmp/app_pc_static_only" \
  "$tmp/proj/build/app_cmake" "$tmp/proj/build/app_cmake_static"; do
  out=$("$app" "$addr" 2>&1) || fail "$(basename "$app"): $out"
  case $out in
  "4 batches of 256 samples, shm mode") echo "$(basename "$app"): $out" ;;
  *) fail "$(basename "$app") printed: $out" ;;
  esac
done
kill -TERM "$chimed_pid"
st=0
wait "$chimed_pid" || st=$?
chimed_pid=""
[ "$st" = 0 ] || fail "chimed exited with $st: $(cat "$tmp/chimed.err")"
echo "test_install: OK"
