"""chime.ensure_server with real processes: ranks (es_rank.py, one process
each) elect one owner whose supervisor runs chimed; the server stops when
the owner exits however it exits; attach never starts one; a crashed run's
files do not block the next. Every wait is bounded, and every process a
test started (ranks, supervisors, chimed) is ended by its pid."""
import fcntl
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import chime
from chime import _server

HERE = pathlib.Path(__file__).resolve().parent
WAIT_S = 60  # bound on any one wait below; the happy path takes ~1 s
CONFIG = {"tables": [{"name": "t", "spec": "x:u64[]", "capacity": 1000,
                      "sampler": "fifo", "min_size": 1}]}


def _gone(pid, timeout=WAIT_S):
    """Waits until pid is no longer running (a zombie counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _lock_free(run_dir, name):
    fd = os.open(os.path.join(run_dir, name + ".lock"),
                 os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class Job:
    """Ranks of one job in a run_dir of their own (short, under /tmp, so
    the socket path fits in sun_path)."""

    def __init__(self):
        self.run_dir = tempfile.mkdtemp(prefix="chime-es-")
        self.ranks = []

    def spawn(self, name="job", mode="auto", config=CONFIG, append=0,
              timeout=WAIT_S, **kw):
        arg = {"name": name, "run_dir": self.run_dir, "mode": mode,
               "timeout": timeout, "append": append, **kw}
        if config is not None:
            arg["config"] = config
        env = dict(os.environ)
        argv = [sys.executable, str(HERE / "es_rank.py"), json.dumps(arg)]
        p = subprocess.Popen(argv, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env, text=True)
        self.ranks.append(p)
        return p

    def report(self, p):
        """The rank's JSON line (bounded wait)."""
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        if not sel.select(WAIT_S):
            pytest.fail(f"rank {p.pid} said nothing in {WAIT_S} s")
        line = p.stdout.readline()
        if not line:
            pytest.fail(f"rank {p.pid} exited with {p.wait(WAIT_S)} "
                        f"without a report")
        return json.loads(line)

    def finish(self, p):
        """Lets a rank exit normally; returns its status."""
        p.stdin.close()
        return p.wait(WAIT_S)

    def cleanup(self):
        for p in self.ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
        # Supervisors and chimeds started for this run_dir: their command
        # lines name it (a test that passed left none).
        for d in pathlib.Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if self.run_dir.encode() in cmd and int(d.name) != os.getpid():
                try:
                    os.kill(int(d.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.run_dir, ignore_errors=True)


@pytest.fixture
def job():
    j = Job()
    try:
        yield j
    finally:
        j.cleanup()


@pytest.mark.parametrize("mode", ["auto", "spawn"])
def test_ranks_elect_one_owner(job, mode):
    ranks = [job.spawn(mode=mode, append=5) for _ in range(4)]
    reports = [job.report(p) for p in ranks]
    assert sum(r["owner"] for r in reports) == 1, reports
    assert len({r["address"] for r in reports}) == 1
    assert len({r["chimed_pid"] for r in reports}) == 1
    assert reports[0]["address"] == f"unix:{job.run_dir}/job.sock"
    st = chime.server_state("job", run_dir=job.run_dir)
    assert st["chimed_pid"] == reports[0]["chimed_pid"]
    # every rank wrote into the one server
    with chime.ensure_server("job", mode="attach", run_dir=job.run_dir,
                             timeout=10) as c:
        t = {t["name"]: t for t in c.stats()["tables"]}["t"]
        assert t["size"] == 20
    owner = next(p for p, r in zip(ranks, reports) if r["owner"])
    for p in ranks:
        if p is not owner:
            assert job.finish(p) == 0
    assert not _gone(st["chimed_pid"], timeout=0.5)  # others left: it stays
    assert not _lock_free(job.run_dir, "job")
    assert job.finish(owner) == 0
    # a normal exit stops the server before the owner's process ends
    assert _gone(st["chimed_pid"], timeout=0.1)
    assert _gone(st["supervisor_pid"])
    assert chime.server_state("job", run_dir=job.run_dir) is None
    assert not os.path.exists(os.path.join(job.run_dir, "job.json"))
    assert _lock_free(job.run_dir, "job")
    log = pathlib.Path(job.run_dir, "job.log").read_text()
    assert "owner" in log and "exited with 0" in log


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_owner_death_stops_server(job, sig):
    owner = job.spawn()
    first = job.report(owner)
    assert first["owner"]
    other = job.spawn()
    second = job.report(other)
    assert not second["owner"]
    assert second["chimed_pid"] == first["chimed_pid"]
    owner.send_signal(getattr(signal, sig))
    owner.wait(WAIT_S)
    assert _gone(first["chimed_pid"]), "chimed outlived its owner"
    assert _gone(first["supervisor_pid"])
    log = pathlib.Path(job.run_dir, "job.log").read_text()
    assert "chimed %d exited with 0" % first["chimed_pid"] in log, log
    if sig == "SIGINT":
        # KeyboardInterrupt: the owner's own exit path stopped it
        assert "signal 15" in log, log
    else:
        assert f"owner {first['pid']} is gone" in log, log
    # The lock of the dead owner does not block the next run: the waiting
    # rank is still connected to nothing, and a new rank becomes owner.
    again = job.spawn()
    third = job.report(again)
    assert third["owner"] and third["chimed_pid"] != first["chimed_pid"]
    assert job.finish(again) == 0
    assert _gone(third["chimed_pid"])
    assert job.finish(other) == 0


@pytest.mark.parametrize("how", ["exit", "SIGKILL"])
def test_unary_calls_after_owner_left(job, how):
    """Once the owner is gone (and its server with it), another rank's
    unary calls raise what its streams and writers raise, ShutdownError or
    DisconnectedError, not a plain chime.Error (CHIME_EUNAVAILABLE)."""
    owner = job.spawn()
    first = job.report(owner)
    assert first["owner"]
    with chime.ensure_server("job", mode="attach", run_dir=job.run_dir,
                             timeout=10) as c:
        assert c.info()["tables"][0]["name"] == "t"
        if how == "exit":
            assert job.finish(owner) == 0
        else:
            owner.kill()
            owner.wait(WAIT_S)
        assert _gone(first["chimed_pid"])
        for call in (c.info, c.stats, c.checkpoint,
                     lambda: c.mutate_priorities("t", keys=[1],
                                                 priorities=[1.0]),
                     lambda: c.writer("t"), lambda: c.stream("t")):
            with pytest.raises((chime.ShutdownError,
                                chime.DisconnectedError)) as e:
                call()
            assert e.value.name in ("CHIME_ESHUTDOWN", "CHIME_EDISCONNECTED")


def test_supervisor_killed(job):
    """If the supervisor itself is SIGKILLed, chimed gets SIGTERM
    (PR_SET_PDEATHSIG) and stops; the lock is free once it has exited, and
    the owner's next ensure_server starts a new one."""
    owner = job.spawn()
    first = job.report(owner)
    os.kill(first["supervisor_pid"], signal.SIGKILL)
    assert _gone(first["chimed_pid"]), "chimed outlived its supervisor"
    deadline = time.monotonic() + WAIT_S
    while not _lock_free(job.run_dir, "job"):
        assert time.monotonic() < deadline, "lock held after chimed exited"
        time.sleep(0.05)
    again = job.spawn()
    second = job.report(again)
    assert second["owner"] and second["chimed_pid"] != first["chimed_pid"]
    assert job.finish(again) == 0 and job.finish(owner) == 0


def test_chimed_crash(job):
    """chimed dies (SIGKILL): the supervisor removes the state and exits,
    the lock is free, and the next rank starts a new server."""
    owner = job.spawn()
    first = job.report(owner)
    os.kill(first["chimed_pid"], signal.SIGKILL)
    assert _gone(first["supervisor_pid"])
    assert chime.server_state("job", run_dir=job.run_dir) is None
    assert _lock_free(job.run_dir, "job")
    log = pathlib.Path(job.run_dir, "job.log").read_text()
    assert "chimed exited with -9" in log, log
    again = job.spawn()
    second = job.report(again)
    assert second["owner"] and second["chimed_pid"] != first["chimed_pid"]
    assert job.finish(again) == 0 and job.finish(owner) == 0


def test_attach_never_starts_one(job):
    t0 = time.monotonic()
    with pytest.raises(chime.TimeoutError) as e:
        chime.ensure_server("none", mode="attach", run_dir=job.run_dir,
                            config=CONFIG, timeout=0.5)
    assert time.monotonic() - t0 >= 0.45
    assert e.value.name == "CHIME_ETIMEDOUT" and "no server" in str(e.value)
    assert os.listdir(job.run_dir) == []  # no lock, no log, nothing started
    # a rank in attach mode waits for an owner that comes later
    waiting = job.spawn(mode="attach")
    time.sleep(0.3)
    assert waiting.poll() is None
    owner = job.spawn()
    r_owner, r_wait = job.report(owner), job.report(waiting)
    assert r_owner["owner"] and not r_wait["owner"]
    assert r_wait["chimed_pid"] == r_owner["chimed_pid"]
    assert job.finish(waiting) == 0 and job.finish(owner) == 0


def test_stale_files_from_a_crashed_run(job):
    """A crash (owner, supervisor and chimed SIGKILLed) leaves the lock
    file, a state file naming a dead chimed and the socket file; the next
    ensure_server starts afresh. Here this test's process is the owner."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    rd = pathlib.Path(job.run_dir)
    (rd / "job.lock").write_text("")
    (rd / "job.json").write_text(json.dumps({
        "address": f"unix:{rd}/job.sock", "chimed_pid": dead.pid,
        "supervisor_pid": dead.pid, "owner_pid": dead.pid}))
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(rd / "job.sock"))
    s.close()  # the file stays, nobody listens
    assert chime.server_state("job", run_dir=job.run_dir) is None
    with chime.ensure_server("job", config=CONFIG, run_dir=job.run_dir,
                             timeout=WAIT_S) as c:
        assert [t["name"] for t in c.info()["tables"]] == ["t"]
        st = chime.server_state("job", run_dir=job.run_dir)
        assert st["owner_pid"] == os.getpid()
        # another rank of this job finds it
        r = job.report(job.spawn())
        assert not r["owner"] and r["chimed_pid"] == st["chimed_pid"]
        assert job.finish(job.ranks[-1]) == 0
    assert chime.stop_server("job", run_dir=job.run_dir) == 0
    assert _gone(st["chimed_pid"], timeout=0.1)
    assert _lock_free(job.run_dir, "job")
    with pytest.raises(chime.InvalidArgumentError):
        chime.stop_server("job", run_dir=job.run_dir)  # not ours any more


def test_chimed_that_fails_to_start(job):
    bad = {"tables": [{"name": "t", "spec": "x:nope[]", "capacity": 1}]}
    with pytest.raises(chime.Error, match="did not start") as e:
        chime.ensure_server("bad", config=bad, run_dir=job.run_dir,
                            timeout=WAIT_S)
    assert "x:nope" in str(e.value) or "nope" in str(e.value)
    assert _lock_free(job.run_dir, "bad")


def test_where_chimed_is_found(job, monkeypatch):
    monkeypatch.delenv("CHIMED", raising=False)
    from chime import _build
    assert _build.CHIMED and os.access(_build.CHIMED, os.X_OK)
    assert _server._find_chimed(None) == os.path.abspath(_build.CHIMED)
    monkeypatch.setenv("CHIMED", "/nonexistent/chimed")
    with pytest.raises(chime.NotFoundError, match="CHIMED"):
        _server._find_chimed(None)
    with pytest.raises(chime.NotFoundError, match="chimed="):
        chime.ensure_server("x", config=CONFIG, run_dir=job.run_dir,
                            chimed="/nonexistent/chimed", timeout=5)
    assert _lock_free(job.run_dir, "x")


def test_bad_arguments(job):
    with pytest.raises(chime.InvalidArgumentError):
        chime.ensure_server("a/b", run_dir=job.run_dir)
    with pytest.raises(chime.InvalidArgumentError):
        chime.ensure_server("ok", mode="bogus", run_dir=job.run_dir)
