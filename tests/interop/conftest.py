"""Fixtures for the interop tests: Python stubs generated from
proto/chime.proto alone, and a real chimed to talk to. These tests use no
chime code, only the proto and the wire (hence tests/interop, apart from the
tests of the `chime` Python package). Run them with scripts/interop.sh.

Environment: CHIMED (default build/src/server/chimed), PROTOC (default protoc)
and GRPC_PYTHON_PLUGIN (default grpc_python_plugin, Debian's
protobuf-compiler-grpc).
"""
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 10

def _tool(env, default, package):
    path = shutil.which(os.environ.get(env, default))
    if path is None:
        pytest.fail(f"{default} not found (Debian package {package}; "
                    f"or set {env})")
    return path


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """(chime_pb2, chime_pb2_grpc), generated now into a temp dir."""
    out = tmp_path_factory.mktemp("gen")
    protoc = _tool("PROTOC", "protoc", "protobuf-compiler")
    plugin = _tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin",
                   "protobuf-compiler-grpc")
    subprocess.run([protoc, f"-I{ROOT / 'proto'}", f"--python_out={out}",
                    f"--grpc_python_out={out}",
                    f"--plugin=protoc-gen-grpc_python={plugin}",
                    str(ROOT / "proto" / "chime.proto")],
                   check=True, timeout=60)
    sys.path.insert(0, str(out))
    try:
        return (importlib.import_module("chime_pb2"),
                importlib.import_module("chime_pb2_grpc"))
    finally:
        sys.path.remove(str(out))


def _wait_listening(proc, out_path):
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in out_path.read_text().splitlines():
            if line.startswith("listening on "):
                return line[len("listening on "):]
        if proc.poll() is not None:
            pytest.fail(f"chimed exited with {proc.returncode} before "
                        "listening")
        time.sleep(0.05)
    pytest.fail(f"chimed did not say 'listening on' in {START_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def chimed(request, tmp_path_factory):
    """Address ("127.0.0.1:PORT") of a chimed started for this module with
    the module's CONFIG (chimed's JSON config).
    Stopped with SIGTERM (SIGKILL after STOP_TIMEOUT_S); it must exit 0."""
    binary = pathlib.Path(os.environ.get(
        "CHIMED", ROOT / "build" / "src" / "server" / "chimed"))
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built (set CHIMED)")
    tmp = tmp_path_factory.mktemp("chimed")
    config = tmp / "chimed.json"
    config.write_text(request.module.CONFIG)
    argv = [str(binary), "--listen", "127.0.0.1:0", "--config", str(config)]
    # setpriv (util-linux): chimed dies with pytest even when pytest is
    # killed before its teardown runs.
    if shutil.which("setpriv"):
        argv = ["setpriv", "--pdeathsig", "KILL"] + argv
    out_path = tmp / "stdout"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stdin=subprocess.DEVNULL)
    try:
        yield _wait_listening(proc, out_path)
    finally:
        proc.terminate()
        try:
            rc = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"chimed ignored SIGTERM for {STOP_TIMEOUT_S} s")
    assert rc == 0, f"chimed exited with {rc} after SIGTERM"


@pytest.fixture
def stub(pb, chimed):
    import grpc

    # The limits docs/protocol.md asks every client for.
    options = [("grpc.max_receive_message_length", 64 << 20),
               ("grpc.max_send_message_length", 64 << 20),
               ("grpc.max_metadata_size", 68 << 10)]
    with grpc.insecure_channel(chimed, options=options) as channel:
        yield pb[1].ChimeStub(channel)
