"""fork() with chime objects open (docs/python.md, fork): a child's new
client works (shm and stream mode) while the parent's stream threads poll,
inherited objects fail at once with a clear error, the parent's client,
writer and streams work at once afterwards; multiprocessing actors and a
torch DataLoader's workers fork exactly like this. Each scenario runs in a
process of its own (fork_case.py) so the process that forks is not
pytest."""
import os
import pathlib
import signal
import subprocess
import sys

import pytest

import conftest

HERE = pathlib.Path(__file__).resolve().parent
TABLES = [{"name": "u", "spec": "x:i64[]", "capacity": 100000,
           "sampler": "uniform", "min_size": 1}]


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("fork"),
                             tables=TABLES) as (proc, address):
        yield address
        assert proc.poll() is None, "chimed died during the tests"


def run_case(case, address, env=None):
    """Runs fork_case.py CASE in a session of its own: whatever it forked
    goes with it when it overstays."""
    p = subprocess.Popen([sys.executable, str(HERE / "fork_case.py"), case,
                          address], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **(env or {})},
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=150)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    assert p.returncode == 0 and out.strip().endswith("ok"), (
        f"{case}: exit {p.returncode}\n{out}\n{err}")


def test_child_makes_its_own_client(addr):
    run_case("child_own_client", addr)


def test_child_reads_while_parent_reads(addr):
    run_case("child_while_parent_reads", addr)


def test_multiprocessing_fork_actors(addr):
    run_case("multiprocessing_actors", addr)


def test_torch_dataloader_workers(addr):
    pytest.importorskip("torch", reason="torch is not installed")
    run_case("dataloader", addr)


def test_fork_support_off_is_a_clear_error(addr):
    run_case("fork_support_off", addr, env={"GRPC_POLL_STRATEGY": "epoll1"})
