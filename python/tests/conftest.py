"""Fixtures for the tests of the `chime` Python package: the extension from
the build tree (PYTHONPATH=build/python, set by scripts/pytest.sh) and real
chimed processes.

Environment: CHIMED (default build/src/server/chimed).
"""
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 10

# Every dtype chime has, scalars and multi-dimensional leaves; `id` tells
# samples apart whatever order a table hands them out in.
MIXED_SPEC = ("id:u64[], a:u8[3,5], b:i8[2], c:u16[], d:i16[2,2], e:u32[3], "
              "f:i32[], g:i64[2], h:f16[4], k:bf16[2], m:f32[2,3], n:f64[], "
              "o:bool[3]")


def _table(name, spec=MIXED_SPEC, sampler="fifo", capacity=100000):
    return {"name": name, "spec": spec, "capacity": capacity,
            "sampler": sampler, "min_size": 1}


TABLES = [_table(n) for n in ("rt_shm", "rt_stream", "ext", "app", "misc",
                              "empty", "release", "close", "gil")]
TABLES.append(_table("hold", spec="x:u8[256], id:u64[]"))
TABLES.append({"name": "heap", "spec": "x:u64[]", "capacity": 100,
               "sampler": "max_heap", "max_times_sampled": 1})
# fifo and small: inserts beyond 8 wait for room that never comes.
TABLES.append({"name": "full", "spec": "x:u64[]", "capacity": 8,
               "sampler": "fifo", "min_size": 1})
TABLES.append({"name": "reuse", "spec": "x:u64[]", "capacity": 100,
               "sampler": "lifo", "max_times_sampled": 2})
TABLES.append({"name": "seq", "spec": "t:u32[], s:u32[]",
               "capacity_steps": 256, "sequence_length": 4, "stride": 2,
               "episode_end": "pad", "sampler": "fifo"})


@contextlib.contextmanager
def run_chimed(tmp, tables=TABLES, extra=None, args=(),
               listen="127.0.0.1:0", prefix=()):
    """Yields (process, "127.0.0.1:PORT"); stops it with SIGTERM (SIGKILL
    after STOP_TIMEOUT_S) unless the test already did. extra: more config
    keys (auth, tls, checkpoint); args: more chimed arguments; listen: its
    address; prefix: what runs it (`ip netns exec NS`, which execs it)."""
    binary = pathlib.Path(os.environ.get(
        "CHIMED", ROOT / "build" / "src" / "server" / "chimed"))
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built (set CHIMED)")
    config = tmp / "chimed.json"
    config.write_text(json.dumps({"listen": listen,
                                  "handoff_socket": "@auto",
                                  "tables": tables, **(extra or {})}))
    argv = [*prefix, str(binary), "--listen", listen, "--config", str(config),
            *args]
    # chimed dies with pytest even when pytest is killed before teardown.
    if shutil.which("setpriv"):
        argv = ["setpriv", "--pdeathsig", "KILL"] + argv
    out_path = tmp / "stdout"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        addr = None
        while addr is None:
            for line in out_path.read_text().splitlines():
                if line.startswith("listening on "):
                    addr = line[len("listening on "):].strip()
            if addr is None:
                if proc.poll() is not None:
                    pytest.fail(f"chimed exited with {proc.returncode}")
                if time.monotonic() > deadline:
                    pytest.fail("chimed did not say 'listening on'")
                time.sleep(0.05)
        yield proc, addr
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail(f"chimed ignored SIGTERM for {STOP_TIMEOUT_S} s")


@contextlib.contextmanager
def run_shards(tmp, tables, shards=(1, 2)):
    """Yields the addresses of one chimed per shard number (config
    "shard"), each in a directory of its own under tmp."""
    with contextlib.ExitStack() as stack:
        addrs = []
        for n in shards:
            (tmp / str(n)).mkdir()
            _, addr = stack.enter_context(
                run_chimed(tmp / str(n), tables, {"shard": n}))
            addrs.append(addr)
        yield addrs


@pytest.fixture(scope="module")
def chimed(tmp_path_factory):
    """Address of a chimed shared by the tests of a module."""
    with run_chimed(tmp_path_factory.mktemp("chimed")) as (proc, addr):
        yield addr
        assert proc.poll() is None, "chimed died during the tests"


@pytest.fixture
def own_chimed(tmp_path):
    """(process, address) of a chimed for one test, which may stop it."""
    with run_chimed(tmp_path) as pa:
        yield pa


@pytest.fixture
def client(chimed):
    import chime
    with chime.Client(chimed) as c:
        yield c


def chimectl(*args):
    """What the built chimectl (beside CHIMED's build tree) prints to
    stdout for args; fails the test if it exits non-zero."""
    chimed_bin = pathlib.Path(os.environ.get(
        "CHIMED", ROOT / "build" / "src" / "server" / "chimed"))
    binary = chimed_bin.parents[2] / "examples" / "chimectl"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built")
    return subprocess.run([str(binary), *args], check=True,
                          capture_output=True, text=True, timeout=30).stdout


def wait_until(pred, timeout):
    """Polls pred every 10 ms; fails the test if it is not true within
    timeout seconds."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.01)


def run_example(argv, timeout):
    """Runs an example (argv after the Python interpreter) in a session of
    its own, so that a timeout ends its child processes too; fails the
    test if it runs over timeout seconds or exits non-zero. Its stdout
    (printed: pytest shows it with a failure) and the JSON of its last
    line."""
    import signal
    import sys
    p = subprocess.Popen([sys.executable, *map(str, argv)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        pytest.fail(f"{argv[0]} ran over {timeout} s: {stderr}")
    print(stdout)
    assert p.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])
