"""Objects used across threads and objects never opened: Client.close()
while another thread is inside a call waits for that call (the C client
is destroyed by the last one out, not under it); Stream.set_version()
follows next()'s one-call rule (RuntimeError while next() runs);
Client, Writer and Stream made by __new__ without __init__ raise a clear
error or say None from every method and attribute, never crash; a
sequence writer's end_episode() that timed out leaves no end pending for
later steps."""
import contextlib
import os
import signal
import sys
import threading

import numpy as np
import pytest

import chime
import conftest

TABLES = [{"name": "t", "spec": "x:u64[]", "capacity": 1000,
           "sampler": "fifo", "min_size": 1},
          {"name": "seq", "spec": "x:u32[]", "capacity_steps": 256,
           "sequence_length": 2, "stride": 1, "episode_end": "drop",
           "sampler": "fifo"}]
JOIN_S = 30


@pytest.fixture
def server(tmp_path):
    """(process, address) of a chimed this test may SIGSTOP; it is always
    continued before the fixture stops it."""
    with conftest.run_chimed(tmp_path, TABLES) as (proc, addr):
        try:
            yield proc, addr
        finally:
            os.kill(proc.pid, signal.SIGCONT)


@contextlib.contextmanager
def stopped(proc):
    """The server stopped (SIGSTOP): a call to it waits until continued."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def in_call(target, name):
    """Starts target() in a thread and returns (thread, entered, result)
    once the thread has called the C method `name` (a profile hook sees
    the call begin). The switch interval is raised meanwhile so that the
    thread keeps the GIL from there until the method lets go of it to wait,
    i.e. this returns with the thread inside the call."""
    entered = threading.Event()
    result = {}

    def hook(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", None) == name:
            entered.set()

    def run():
        threading.setprofile(None)
        sys.setprofile(hook)
        try:
            result["value"] = target()
        except BaseException as e:  # reported to the test
            result["error"] = e
        finally:
            sys.setprofile(None)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        th = threading.Thread(target=run, daemon=True)
        th.start()
        assert entered.wait(JOIN_S), f"{name}() was never called"
    finally:
        sys.setswitchinterval(old)
    return th, result


def test_close_waits_for_a_call_in_another_thread(server):
    """info() in a thread, blocked on a stopped server; close() from this
    thread returns at once, the call ends with its answer once the server
    goes on, and the client is closed after it (ASan: no use after free,
    as there was when close() destroyed the client under the call)."""
    proc, addr = server
    for attempt in range(5):
        c = chime.Client(addr, timeout=20.0)
        assert c.info()["tables"]  # connected
        with stopped(proc):
            th, result = in_call(c.info, "info")
            c.close()  # returns while info() waits
            assert th.is_alive()
            with pytest.raises(chime.Error, match="closed") as e:
                c.stats()
            assert e.value.code == chime.ECLOSED
        th.join(JOIN_S)
        assert not th.is_alive()
        err = result.get("error")
        if isinstance(err, chime.Error) and err.code == chime.ECLOSED:
            continue  # close() came first after all: try again
        assert err is None, err
        assert [t["name"] for t in result["value"]["tables"]] == ["t", "seq"]
        with pytest.raises(chime.Error) as e:
            c.info()
        assert e.value.code == chime.ECLOSED
        return
    pytest.fail("close() never overlapped info() in 5 tries")


@pytest.mark.parametrize("call", ["stats", "shards", "set_version",
                                  "mutate_priorities", "writer", "stream"])
def test_close_during_other_calls(server, call):
    """The same for every call that waits without the GIL: the call
    completes (or fails with the server's error), never crashes, and a
    writer or stream it opened keeps the client until it closes."""
    proc, addr = server
    c = chime.Client(addr, timeout=20.0)
    c.info()
    fn = {"stats": c.stats, "shards": c.shards,
          "set_version": lambda: c.set_version("t", 3),
          "mutate_priorities": lambda: c.mutate_priorities(
              "t", keys=[1], priorities=[1.0]),
          "writer": lambda: c.writer("t"),
          "stream": lambda: c.stream("t", batch_size=1, mode="stream")}[call]
    with stopped(proc):
        th, result = in_call(fn, call)
        c.close()
    th.join(JOIN_S)
    assert not th.is_alive()
    err = result.get("error")
    assert err is None or isinstance(err, chime.Error), err
    got = result.get("value")
    if call == "writer" and got is not None:
        got.append({"x": 5})
        got.close()
    elif call == "stream" and got is not None:
        got.close()
    with pytest.raises(chime.Error) as e:
        c.info()
    assert e.value.code == chime.ECLOSED


def stream_busy(s):
    try:
        s.stats()
    except chime.Error:
        return True  # "closed or busy": next() runs
    return False


def test_set_version_during_next_is_refused(server):
    _, addr = server
    with chime.Client(addr) as c, c.stream("t", batch_size=4) as s:
        err = {}

        def run():
            try:
                s.next(timeout=None)
            except chime.Error as e:
                err["e"] = e
        th = threading.Thread(target=run, daemon=True)
        th.start()
        conftest.wait_until(lambda: stream_busy(s), JOIN_S)
        with pytest.raises(RuntimeError, match="two threads"):
            s.set_version(7)
        s.close()  # next() ends with ECLOSED
        th.join(JOIN_S)
        assert not th.is_alive()
        assert err["e"].code == chime.ECLOSED
        with pytest.raises(chime.Error) as e:
            s.set_version(8)
        assert e.value.code == chime.ECLOSED


def test_close_during_set_version_waits(server):
    """A stream closed while another thread's set_version() waits on a
    stopped server closes once that call returns, not under it."""
    proc, addr = server
    with chime.Client(addr, timeout=20.0) as c:
        s = c.stream("t", batch_size=4, mode="stream")
        with stopped(proc):
            th, result = in_call(lambda: s.set_version(5), "set_version")
            s.close()
            assert s.closed
        th.join(JOIN_S)
        assert not th.is_alive()
        err = result.get("error")
        assert err is None or isinstance(err, chime.Error), err


def touch(obj):
    """Every public attribute and method (no arguments, then one) of obj:
    each returns or raises an exception, none crashes."""
    seen = {}
    for name in dir(obj):
        if name.startswith("__") and name not in ("__enter__", "__exit__",
                                                  "__iter__", "__next__"):
            continue
        try:
            v = getattr(obj, name)
        except Exception as e:
            seen[name] = e
            continue
        if not callable(v):
            seen[name] = v
            continue
        args = {"__exit__": (None, None, None)}.get(name, ())
        for a in (args, ("t",), ("t", 1), ({"x": 1},)):
            try:
                seen[name] = v(*a)
            except TypeError:
                continue  # another arity
            except Exception as e:
                seen[name] = e
            break
    return seen


def test_objects_made_by_new_without_init():
    s = chime.Stream.__new__(chime.Stream)
    assert s.fallback_reason is None and s.mode is None
    assert s.device is None and s.closed
    with pytest.raises(chime.Error, match="closed") as e:
        s.next()
    assert e.value.code == chime.ECLOSED
    with pytest.raises(chime.Error):
        s.set_version(1)
    with pytest.raises(chime.Error):
        s.stats()
    touch(s)

    w = chime.Writer.__new__(chime.Writer)
    assert w.acked == 0 and w.taken == 0
    for call in (lambda: w.append({"x": 1}), lambda: w.extend({"x": [1]}),
                 w.flush, w.end_episode):
        with pytest.raises(chime.Error, match="not open") as e:
            call()
        assert e.value.code == chime.ECLOSED
    w.close()
    touch(w)

    c = chime.Client.__new__(chime.Client)
    for call in (c.info, c.stats, c.shards, c.checkpoint,
                 lambda: c.set_version("t", 1),
                 lambda: c.mutate_priorities("t", keys=[1], priorities=[1]),
                 lambda: c.writer("t"), lambda: c.stream("t")):
        with pytest.raises(chime.Error, match="not initialised") as e:
            call()
        assert e.value.code == chime.ECLOSED
    touch(c)
    c.close()

    with pytest.raises(TypeError):
        chime.Batch.__new__(chime.Batch)
    with pytest.raises(TypeError):
        chime.View.__new__(chime.View)
    del s, w, c


def read_windows(c, n):
    with c.stream("seq", batch_size=n, mode="stream", slots=2) as s:
        b = s.next(timeout=JOIN_S)
        out = b["x"].tolist(), b.info["episode_id"].tolist()
        b.release()
    return out


def test_end_episode_that_timed_out_ends_nothing(server):
    """end_episode() fails with TimeoutError when the writer has no room
    to send (max_inflight unacked, the server stopped): nothing was ended,
    so the steps appended next join the same episode and are not ended
    with it; a later end_episode() ends it. (The end stayed pending and
    rode on the next message, ending the episode after later steps.)"""
    proc, addr = server
    with chime.Client(addr) as c:
        w = c.writer("seq", max_inflight=1, timeout=0.5)
        with stopped(proc):
            w.append({"x": 1})
            w.end_episode()  # sent at once: the one message in flight
            w.append({"x": 2})
            w.append({"x": 3})
            with pytest.raises(chime.TimeoutError):
                w.end_episode()  # no room: not sent
            w.append({"x": 4})
        with pytest.raises(chime.InvalidArgumentError):
            w.timeout = 0
        w.timeout = 60.0  # only the stopped server's calls were to time out
        assert w.timeout == 60.0
        w.flush()  # 2, 3, 4: the episode stays open
        w.append({"x": 5})
        w.end_episode()
        w.flush()
        w.close()
        t = {t["name"]: t for t in c.stats()["tables"]}["seq"]
        assert t["episodes_open"] == 0
        assert t["size"] == 3, "steps after a failed end_episode were ended"
        x, eps = read_windows(c, 3)
        assert x == [[2, 3], [3, 4], [4, 5]]
        assert len(set(eps)) == 1


def test_writer_collected_unflushed_is_reported(server, monkeypatch):
    """A Writer garbage-collected without close() flushes; when that fails
    (the server stopped past the writer's timeout) the error goes to
    sys.unraisablehook, naming the loss, rather than nowhere."""
    proc, addr = server
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    with chime.Client(addr) as c:
        w = c.writer("t", timeout=0.5)
        with stopped(proc):
            w.append({"x": 1})
            del w  # the last reference: collected here
        assert len(seen) == 1, seen
        assert isinstance(seen[0].exc_value, chime.Error)
        assert "may be lost" in str(seen[0].exc_value)
