"""One fork scenario for test_fork.py, run as a process of its own (so the
process that forks is a plain one, not pytest):

    fork_case.py CASE ADDRESS

Exits 0 when every check held; a failed check raises (exit 1, the
traceback on stderr). Children report through their exit status.
"""
import os
import sys
import time

import numpy as np

import chime

TABLE = "u"  # uniform, spec x:i64[] (test_fork.py)
WAIT_S = 60


def fill(c, n=512, base=0):
    with c.writer(TABLE) as w:
        w.extend({"x": np.arange(base, base + n, dtype=np.int64)})


def batches(s, k):
    for _ in range(k):
        b = s.next(timeout=20)
        assert b.count == 8 and b["x"].shape == (8,), b.count
        b.release()


def wait_child(pid):
    """The child's exit status, or it is killed after WAIT_S."""
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} did not finish in {WAIT_S} s")


def expect_enotsup(what, call):
    """An inherited object fails at once, saying it is the parent's."""
    t0 = time.monotonic()
    try:
        call()
    except chime.Error as e:
        assert e.name == "CHIME_ENOTSUP", (what, e.name, str(e))
        assert "fork()" in str(e) and "create a new client" in str(e), (
            what, str(e))
        # at once: no wait for a timeout of any kind
        assert time.monotonic() - t0 < 2.0, (what, time.monotonic() - t0)
        return
    raise AssertionError(f"{what}: no error in the child")


def own_client_works(addr):
    with chime.Client(addr, timeout=10.0) as c:
        assert c.info()["tables"][0]["name"] == TABLE
        fill(c, 64, base=10**6 + os.getpid())
        for mode in ("shm", "stream"):
            with c.stream(TABLE, batch_size=8, mode=mode) as s:
                assert s.mode == mode
                batches(s, 3)


def case_child_own_client(addr):
    """Parent: a client, a writer, a shm and a stream-mode stream, all open
    across the fork. Child: inherited objects fail at once; its own client
    works in both modes while the parent's stream threads poll; it exits
    normally (finalising the inherited objects must not hang). Parent:
    everything works at once afterwards (the client's timeout is 3 s, the
    one the fault ran into)."""
    c = chime.Client(addr, timeout=3.0)
    fill(c)
    w = c.writer(TABLE)
    w.append({"x": 7})
    w.flush()
    s1 = c.stream(TABLE, batch_size=8, mode="shm")
    s2 = c.stream(TABLE, batch_size=8, mode="stream")
    batches(s1, 2)
    batches(s2, 2)
    b_held = s1.next(timeout=20)  # a batch held across the fork
    pid = os.fork()
    if pid == 0:
        try:
            assert b_held["x"].shape == (8,)  # its mapping is readable
            expect_enotsup("info", c.info)
            expect_enotsup("stats", c.stats)
            expect_enotsup("writer()", lambda: c.writer(TABLE))
            expect_enotsup("stream()", lambda: c.stream(TABLE, mode="stream"))
            expect_enotsup("shm next", lambda: s1.next(timeout=5))
            expect_enotsup("stream next", lambda: s2.next(timeout=5))
            expect_enotsup("append", lambda: w.append({"x": 1}))
            expect_enotsup("flush", w.flush)
            own_client_works(addr)
        except BaseException:
            import traceback
            traceback.print_exc()
            os._exit(1)
        sys.exit(0)  # interpreter exit: the inherited objects are freed
    assert wait_child(pid) == 0
    t0 = time.monotonic()
    assert c.info()["tables"][0]["name"] == TABLE
    assert time.monotonic() - t0 < 2.0, "the parent's first call after fork"
    b_held.release()
    batches(s1, 5)
    batches(s2, 5)
    w.append({"x": 8})
    w.flush()
    w.close()
    s1.close()
    s2.close()
    c.close()
    print("ok")


def case_child_while_parent_reads(addr):
    """The other order: the child opens a shm stream and reads while the
    parent keeps reading its own in a thread (the fault: the child hung)."""
    import threading
    c = chime.Client(addr, timeout=3.0)
    fill(c)
    s = c.stream(TABLE, batch_size=8, mode="shm")
    stop = threading.Event()
    got = []

    def read():
        while not stop.is_set():
            b = s.next(timeout=20)
            got.append(b.count)
            b.release()
    t = threading.Thread(target=read)
    t.start()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            try:
                own_client_works(addr)
            except BaseException:
                import traceback
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        pids.append(pid)
    try:
        codes = []
        for p in pids:
            codes.append(wait_child(p))
        assert codes == [0, 0]
    finally:
        stop.set()
        t.join(30)
        for p in pids:  # any left by a failed check
            try:
                os.kill(p, 9)
                os.waitpid(p, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    n = len(got)
    batches(s, 3)
    assert n > 0
    s.close()
    c.close()
    print("ok")


def _actor(addr, base):
    with chime.Client(addr) as c:
        fill(c, 100, base=base)


def case_multiprocessing_actors(addr):
    """multiprocessing with the fork start method, the parent's client and
    stream open: each actor process writes with its own client."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    c = chime.Client(addr, timeout=3.0)
    fill(c)
    with c.stream(TABLE, batch_size=8, mode="shm") as s:
        batches(s, 2)
        before = c.stats()["tables"][0]["inserts"]
        ps = [ctx.Process(target=_actor, args=(addr, 10**7 * (i + 1)))
              for i in range(3)]
        for p in ps:
            p.start()
        try:
            for p in ps:
                p.join(WAIT_S)
                assert p.exitcode == 0, p.exitcode
        finally:
            for p in ps:
                if p.exitcode is None:
                    p.kill()
                    p.join()
        assert c.stats()["tables"][0]["inserts"] == before + 300
        batches(s, 3)
    c.close()
    print("ok")


def case_dataloader(addr):
    """A torch DataLoader with two workers (forked), each opening a stream
    of its own in the worker; the parent holds a client and a stream."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class Batches(IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            with chime.Client(addr, timeout=10.0) as c:
                with c.stream(TABLE, batch_size=8, mode="shm") as s:
                    for _ in range(4):
                        b = s.next(timeout=20)
                        x = torch.from_dlpack(b["x"]).clone()
                        b.release()
                        yield info.id, os.getpid(), x

    c = chime.Client(addr, timeout=3.0)
    fill(c)
    s = c.stream(TABLE, batch_size=8, mode="shm")
    batches(s, 2)
    loader = DataLoader(Batches(), batch_size=None, num_workers=2,
                        multiprocessing_context="fork", timeout=WAIT_S)
    seen = {}
    for wid, pid, x in loader:
        assert x.shape == (8,)
        seen.setdefault(wid, set()).add(pid)
    assert sorted(seen) == [0, 1], seen
    assert all(os.getpid() not in p for p in seen.values())
    t0 = time.monotonic()
    c.info()
    assert time.monotonic() - t0 < 2.0
    batches(s, 3)
    s.close()
    c.close()
    print("ok")


def case_fork_support_off(addr):
    """Started with GRPC_POLL_STRATEGY=epoll1 (gRPC 1.51's fork support
    does not work with it): a child cannot make a client, and says so at
    once instead of hanging."""
    c = chime.Client(addr, timeout=3.0)
    c.info()
    pid = os.fork()
    if pid == 0:
        code = 1
        t0 = time.monotonic()
        try:
            chime.Client(addr)
        except chime.Error as e:
            ok = (e.name == "CHIME_ENOTSUP" and "fork" in str(e) and
                  time.monotonic() - t0 < 2.0)
            if not ok:
                print("child:", e.name, str(e), file=sys.stderr)
            code = 0 if ok else 1
        os._exit(code)
    assert wait_child(pid) == 0
    c.info()
    c.close()
    print("ok")


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]](sys.argv[2])
