"""pip install ./python: the chime package, its C extension built by
setuptools against libchime (docs/python.md, "Installing").

Debian 12 (no package index needed, Debian's setuptools, wheel and numpy):

    pip install --no-build-isolation ./python      # in a venv made with
                                                   # --system-site-packages
    pip install --user --break-system-packages --no-build-isolation ./python

Which libchime:
  - CHIME_BUILD_DIR=DIR: a CMake build tree of chime (its libchime.a, the
    headers of the source tree it was configured from), linked statically:
    the module needs nothing of the tree at run time;
  - otherwise the installed one, found with pkg-config (`chime`, i.e.
    libchime.so: libchime-dev, or cmake --install with PKG_CONFIG_PATH set).
The package's version is the library's (include/chime/version.h), which is
also what chime.__version__ says.
"""
import os
import re
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
# What libchime.a needs, shared (cmake/chime-static.pc.in).
STATIC_DEPS = ["grpc", "gpr", "libprotobuf-c", "libuv", "jansson", "libzstd",
               "libmicrohttpd"]
STANDARD_LIBDIRS = {"/usr/lib", "/lib", "/usr/lib64", "/lib64",
                    "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
                    "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu"}


def die(msg):
    sys.exit(f"chime setup.py: {msg}")


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        die("pkg-config not found (apt-get install pkg-config)")
    except subprocess.CalledProcessError as e:
        die(f"pkg-config {' '.join(args)} failed: {e.stderr.strip()}")
    return shlex.split(out)


def split_flags(flags):
    inc = [f[2:] for f in flags if f.startswith("-I")]
    libdirs = [f[2:] for f in flags if f.startswith("-L")]
    libs = [f[2:] for f in flags if f.startswith("-l")]
    other = [f for f in flags if f[:2] not in ("-I", "-L", "-l")]
    return inc, libdirs, libs, other


def from_build_tree(build):
    build = os.path.abspath(build)
    archive = os.path.join(build, "src", "lib", "libchime.a")
    cache = os.path.join(build, "CMakeCache.txt")
    if not os.path.isfile(archive) or not os.path.isfile(cache):
        die(f"CHIME_BUILD_DIR={build}: no src/lib/libchime.a or "
            f"CMakeCache.txt (cmake --build {build} --target chime_static)")
    src = None
    with open(cache) as f:
        for line in f:
            m = re.match(r"CMAKE_HOME_DIRECTORY:INTERNAL=(.*)", line)
            if m:
                src = m.group(1).strip()
    if not src:
        die(f"{cache} does not name its source directory")
    inc, libdirs, libs, other = split_flags(pkg_config("--libs",
                                                       *STATIC_DEPS))
    return dict(include_dirs=[os.path.join(src, "include")],
                extra_objects=[archive],
                library_dirs=libdirs,
                libraries=libs + ["pthread", "dl", "m"],
                extra_link_args=other,
                runtime_library_dirs=[])


def from_pkg_config():
    inc, _, _, cflags = split_flags(pkg_config("--cflags", "chime"))
    _, libdirs, libs, other = split_flags(pkg_config("--libs", "chime"))
    # pkg-config leaves out -I/usr/include, and --cflags has the
    # dependencies' flags too: chime's own include directory first.
    inc = [pkg_config("--variable=includedir", "chime")[0]] + inc
    # A prefix outside the loader's path (cmake --install --prefix
    # ~/.local): the module finds libchime.so through its rpath.
    rpath = [d for d in libdirs if os.path.realpath(d) not in
             STANDARD_LIBDIRS]
    return dict(include_dirs=inc, extra_objects=[], library_dirs=libdirs,
                libraries=libs, extra_link_args=other,
                runtime_library_dirs=rpath, extra_compile_args=cflags)


def version(include_dirs):
    for d in include_dirs:
        h = os.path.join(d, "chime", "version.h")
        if os.path.isfile(h):
            with open(h) as f:
                m = re.search(r'#define CHIME_VERSION_STRING "([^"]+)"',
                              f.read())
            if m:
                return m.group(1)
    die(f"no chime/version.h under {', '.join(include_dirs)}")


def numpy_include():
    try:
        import numpy
    except ImportError:
        die("numpy is needed to build chime (apt-get install python3-numpy; "
            "in a venv, make it with --system-site-packages)")
    return numpy.get_include()


build_dir = os.environ.get("CHIME_BUILD_DIR")
lib = from_build_tree(build_dir) if build_dir else from_pkg_config()
cflags = lib.pop("extra_compile_args", [])
lib["include_dirs"] = lib["include_dirs"] + [numpy_include()]

ext = Extension(
    "chime._chime",
    sources=sorted(os.path.join("src", f)
                   for f in os.listdir(os.path.join(HERE, "src"))
                   if f.endswith(".c")),
    define_macros=[("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11"] + cflags,
    **lib)

setup(
    name="chime",
    version=version(lib["include_dirs"]),
    description="Replay batches from chimed as zero-copy numpy views",
    packages=["chime"],
    ext_modules=[ext],
    python_requires=">=3.9",
    install_requires=["numpy"],
)
