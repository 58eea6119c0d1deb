"""The `chime` extension against a real chimed: byte-exact round trips in
both modes, extend vs append, views that outlive their batch's turn, the
exceptions, info() and stats()."""
import gc
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import chime
import conftest
from conftest import MIXED_SPEC

DTYPES = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
          "u32": np.uint32, "i32": np.int32, "u64": np.uint64,
          "i64": np.int64, "f16": np.float16, "bf16": np.uint16,
          "f32": np.float32, "f64": np.float64, "bool": np.bool_}
FORMATS = {"u8": "B", "i8": "b", "u16": "H", "i16": "h", "u32": "I",
           "i32": "i", "u64": "Q", "i64": "q", "f16": "e", "bf16": "H",
           "f32": "f", "f64": "d", "bool": "?"}


def parse_spec(text):
    leaves = []
    for name, dt, dims in re.findall(r"(\w+):(\w+)\[([\d,]*)\]", text):
        shape = tuple(int(x) for x in dims.split(",")) if dims else ()
        leaves.append((name, np.dtype(DTYPES[dt]), shape))
    return leaves


LEAVES = parse_spec(MIXED_SPEC)


def random_samples(n, seed):
    """{leaf: [n, *shape]} with every byte random (bool: 0/1), id = index."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, dt, shape in LEAVES:
        if dt == np.bool_:
            a = rng.integers(0, 2, size=(n,) + shape).astype(np.bool_)
        else:
            raw = rng.integers(0, 256, size=n * int(np.prod(shape, dtype=int))
                               * dt.itemsize, dtype=np.uint8)
            a = raw.view(dt).reshape((n,) + shape)
        out[name] = a
    out["id"] = np.arange(n, dtype=np.uint64) + np.uint64(seed * 1000000)
    return out


def read_all(c, table, n, batch_size, mode="auto", **kw):
    """{id: {leaf: bytes}} of n samples read from `table`, and the modes."""
    got = {}
    with c.stream(table, batch_size=batch_size, mode=mode, **kw) as s:
        while len(got) < n:
            b = s.next(timeout=10)
            ids = np.array(b["id"])
            assert b.count == batch_size
            assert b.info.shape == (batch_size,)
            for i, sid in enumerate(ids):
                got[int(sid)] = {name: b[name][i].tobytes()
                                 for name, _, _ in LEAVES}
        return got, s.mode, s.fallback_reason


def expected(samples):
    n = len(samples["id"])
    return {int(samples["id"][i]): {name: np.ascontiguousarray(
        samples[name][i]).tobytes() for name, _, _ in LEAVES}
        for i in range(n)}


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_round_trip_bytes(client, mode):
    table = "rt_" + mode
    samples = random_samples(64, seed=1 if mode == "shm" else 2)
    with client.writer(table) as w:
        for i in range(64):
            w.append({k: v[i] for k, v in samples.items()}, priority=1.0)
        w.flush()
        assert w.acked == 64
    got, used, why = read_all(client, table, 64, 8, mode=mode)
    assert used == mode and why is None
    assert got == expected(samples)


def test_array_views(client):
    samples = random_samples(4, seed=3)
    with client.writer("misc") as w:
        w.extend(samples)
    with client.stream("misc", batch_size=4, mode="shm") as s:
        b = s.next(timeout=10)
        assert b.keys() == [n for n, _, _ in LEAVES]
        for name, dt, shape in LEAVES:
            a = b[name]
            assert a.dtype == dt and a.shape == (4,) + shape
            assert not a.flags.writeable and a.flags.c_contiguous
            with pytest.raises(ValueError):
                a.flags.writeable = True
            assert isinstance(a.base, chime.View)
        info = b.info
        assert info.dtype.names == ("key", "probability", "times_sampled",
                                    "reserved", "insert_time_ns", "priority",
                                    "table_size", "episode_id", "first_step",
                                    "length", "version", "staleness")
        assert info.dtype.itemsize == 80
        assert len(set(info["key"].tolist())) == 4
        assert (info["insert_time_ns"] > 0).all()
        assert (info["priority"] == 1.0).all()
        assert (info["table_size"] >= 1).all()
        # The View behind b.info exports every field of the record through
        # the buffer protocol too (its format had only the first seven).
        raw = np.asarray(info.base)
        assert raw.dtype.names == info.dtype.names
        assert raw.dtype.itemsize == 80
        for name in info.dtype.names:
            assert raw[name].tolist() == info[name].tolist(), name
        m = memoryview(info.base)
        assert m.itemsize == 80 and m.shape == (4,)
        assert m.tobytes() == info.tobytes()
        with pytest.raises(KeyError):
            b["nope"]
        # memoryview through the buffer protocol of the exporter
        mv = memoryview(b["a"].base)
        assert mv.readonly and mv.shape == (4, 3, 5) and mv.format == "B"
        assert np.frombuffer(b["a"].base, np.uint8).tobytes() == \
            b["a"].tobytes()
        assert memoryview(b["h"].base).format == "e"
        # every leaf's format, as the struct module names its dtype (bf16:
        # its bits as uint16)
        spec = dict(re.findall(r"(\w+):(\w+)\[", MIXED_SPEC))
        for name, dt, _ in LEAVES:
            fmt = memoryview(b[name].base).format
            assert fmt == FORMATS[spec[name]], (name, fmt)
            assert struct.calcsize(fmt) == dt.itemsize
        with pytest.raises(ValueError):
            np.frombuffer(b["a"].base, dtype=np.uint8).setflags(write=True)


def test_extend_and_append_agree(client):
    samples = random_samples(40, seed=4)
    prios = np.linspace(0.5, 2.0, 40)
    with client.writer("ext") as w:
        w.extend(samples, priorities=prios)
    with client.writer("app") as w:
        for i in range(40):
            w.append({k: v[i] for k, v in samples.items()},
                     priority=float(prios[i]))
    a, _, _ = read_all(client, "ext", 40, 8, mode="stream")
    b, _, _ = read_all(client, "app", 40, 8, mode="shm")
    assert a == b == expected(samples)


def fill_hold(client, n, seed):
    """Writes n random 256-byte rows x, with ids 0..n-1, into table "hold";
    returns x."""
    x = np.random.default_rng(seed).integers(0, 256, size=(n, 256),
                                             dtype=np.uint8)
    with client.writer("hold") as w:
        w.extend({"x": x, "id": np.arange(n, dtype=np.uint64)})
    return x


def test_view_outlives_200_batches(client):
    """A view keeps its slot leased: with 3 slots a fifo ring reuses a slot
    every two batches, so without the hold the bytes would change."""
    x = fill_hold(client, 2 * 202, seed=5)
    with client.stream("hold", batch_size=2, slots=3, mode="shm") as s:
        assert s.mode == "shm"
        first = s.next(timeout=10)
        kept = first["x"]
        kept_mv = memoryview(first["id"])
        copy, ids = kept.copy(), bytes(kept_mv)
        for _ in range(200):
            b = s.next(timeout=10)
        assert np.array_equal(kept, copy) and bytes(kept_mv) == ids
        assert not first.released
        assert np.array_equal(copy, x[np.frombuffer(ids, np.uint64)])
        del b
        del kept
        gc.collect()
        assert not first.released  # the memoryview still holds it
        kept_mv.release()
        assert first.released
        with pytest.raises(chime.Error):
            first["x"]


def test_release_deferred_while_viewed(client):
    with client.writer("release") as w:
        w.extend(random_samples(8, seed=6))
    with client.stream("release", batch_size=4, mode="shm") as s:
        b = s.next(timeout=10)
        a = b["a"]
        before = a.copy()
        b.release()
        assert not b.released
        with pytest.raises(chime.Error, match="released"):
            b["a"]
        b2 = s.next(timeout=10)
        assert np.array_equal(a, before)
        del a
        assert b.released
        b2.release()
        assert b2.released


def test_close_with_live_view(client):
    with client.writer("close") as w:
        w.extend(random_samples(4, seed=7))
    s = client.stream("close", batch_size=4, mode="shm")
    b = s.next(timeout=10)
    a = b["a"]
    before = a.copy()
    s.close()
    assert s.closed
    with pytest.raises(chime.Error):
        s.next(timeout=0)
    assert np.array_equal(a, before)  # still mapped: the view holds it
    del a, b
    gc.collect()


def test_next_releases_the_gil(client):
    """next() waits without the GIL: this thread inserts meanwhile, and a
    view it drops while next() waits gives its slot back (queued, and
    handed to the library by next() itself)."""
    with client.writer("gil") as w:
        w.extend(random_samples(4, seed=11))
    with client.stream("gil", batch_size=4, mode="shm") as s:
        first = s.next(timeout=10)
        a = first["a"]
        got = {}
        t = threading.Thread(target=lambda: got.update(b=s.next(timeout=20)))
        t.start()
        time.sleep(0.3)
        assert t.is_alive() and not first.released
        del a  # while the other thread is inside next()
        with client.writer("gil") as w:
            w.extend(random_samples(4, seed=12))
        t.join(20)
        assert not t.is_alive()
        assert first.released
        assert got["b"].count == 4


def v_addr(b, leaf):
    return b[leaf].__array_interface__["data"][0]


def test_dlpack_shares_the_ring(client):
    """numpy.from_dlpack (torch.from_dlpack works the same way) gets the
    ring's address, and its tensor holds the batch like an array does."""
    samples = random_samples(4, seed=13)
    with client.writer("misc") as w:
        w.extend(samples)
    with client.stream("misc", batch_size=4, mode="shm") as s:
        b = s.next(timeout=10)
        v = b.view("m")
        assert v.__dlpack_device__() == (1, 0)
        assert np.from_dlpack(v).ctypes.data == v_addr(b, "m")
        del v
        assert b["m"].__dlpack_device__() == (1, 0)
        t = np.from_dlpack(b["m"])  # the array itself, though read-only
        addr = b["m"].__array_interface__["data"][0]
        assert t.__array_interface__["data"][0] == addr
        assert t.dtype == np.float32 and t.shape == (4, 2, 3)
        assert t.tobytes() == samples["m"].tobytes()
        cap = b.view("a").__dlpack__()  # a capsule nobody consumed
        b.release()
        assert not b.released
        del t
        gc.collect()
        assert not b.released
        del cap
        assert b.released


def test_iteration(client):
    with client.writer("misc") as w:
        w.extend(random_samples(8, seed=8))
    seen = 0
    with client.stream("misc", batch_size=4, timeout=0.5) as s:
        with pytest.raises(chime.TimeoutError):
            for b in s:
                seen += b.count
    assert seen == 8


def test_not_found(client):
    with pytest.raises(chime.NotFoundError, match="nope"):
        client.writer("nope")
    with pytest.raises(chime.NotFoundError):
        client.stream("nope", batch_size=4)


def test_timeout(client):
    with client.stream("empty", batch_size=4) as s:
        t0 = time.monotonic()
        with pytest.raises(chime.TimeoutError) as e:
            s.next(timeout=0.3)
        assert time.monotonic() - t0 >= 0.25
        assert isinstance(e.value, TimeoutError)
        assert isinstance(e.value, chime.Error)
        assert e.value.name == "CHIME_ETIMEDOUT"


def test_invalid_argument(client):
    with client.writer("misc") as w:
        one = {k: v[0] for k, v in random_samples(1, seed=9).items()}
        with pytest.raises(chime.InvalidArgumentError, match="'a'"):
            w.append({**one, "a": np.zeros((3, 4))})
        with pytest.raises(chime.InvalidArgumentError, match="missing"):
            w.append({k: v for k, v in one.items() if k != "b"})
        with pytest.raises(chime.InvalidArgumentError, match="not a leaf"):
            w.append({**one, "zz": 1})
        # refused by the library itself, with its message
        with pytest.raises(chime.InvalidArgumentError) as e:
            w.append(one, priority=-1.0)
        assert e.value.code == -1
        with pytest.raises(chime.InvalidArgumentError):
            w.extend({k: v[None] for k, v in one.items()}, priorities=[1, 2])
    with pytest.raises(chime.InvalidArgumentError):
        client.stream("misc", mode="bogus")


def test_unavailable_is_base_error():
    c = chime.Client("127.0.0.1:1", timeout=1.0)
    with pytest.raises(chime.Error) as e:
        c.info()
    assert type(e.value) is chime.Error
    assert e.value.name == "CHIME_EUNAVAILABLE"
    c.close()
    with pytest.raises(chime.Error):
        c.info()


def test_shutdown(own_chimed):
    proc, addr = own_chimed
    with chime.Client(addr) as c:
        with c.stream("empty", batch_size=4) as s:
            proc.send_signal(signal.SIGTERM)
            with pytest.raises(chime.ShutdownError):
                s.next(timeout=10)
    assert proc.wait(timeout=10) == 0


def test_writer_closed_by_shutdown(own_chimed):
    """A server shutdown ends a writer with ShutdownError, and the error
    says which samples are in the table: the first `acked` it took."""
    proc, addr = own_chimed
    with chime.Client(addr) as c:
        w = c.writer("full")
        for x in range(5):
            w.append({"x": x})
        w.flush()
        assert w.acked == 5 and w.taken == 5
        # 20 more than the fifo table has room for: they wait, unacked
        w.extend({"x": np.arange(5, 25, dtype=np.uint64)})
        assert w.taken == 25
        timer = threading.Timer(0.5, proc.send_signal, (signal.SIGTERM,))
        timer.start()
        with pytest.raises(chime.ShutdownError) as e:
            w.flush()
        timer.join()
        assert e.value.acked == 5 and e.value.taken == 25
        assert "the first 5 of the 25 samples" in str(e.value)
        assert "other 20 are not known to be in the table" in str(e.value)
        with pytest.raises(chime.ShutdownError) as e:
            w.close()
        assert e.value.acked == 5 and "first 5 of the 25" in str(e.value)
        assert w.acked == 5
    assert proc.wait(timeout=10) == 0


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_disconnected(own_chimed, mode):
    proc, addr = own_chimed
    with chime.Client(addr) as c:
        with c.stream("empty", batch_size=4, mode=mode) as s:
            proc.kill()
            proc.wait()
            with pytest.raises(chime.DisconnectedError):
                s.next(timeout=30)


def test_unary_calls_after_server_killed(own_chimed):
    """A killed server: unary calls of a client that reached it raise
    DisconnectedError, as its streams do; a server that was never there
    stays a plain chime.Error (test_unavailable_is_base_error)."""
    proc, addr = own_chimed
    with chime.Client(addr, timeout=3.0) as c:
        c.info()
        proc.kill()
        proc.wait()
        for _ in range(2):  # the broken connection, then the refused one
            with pytest.raises(chime.DisconnectedError) as e:
                c.info()
            assert e.value.name == "CHIME_EDISCONNECTED"
            assert "server is gone" in str(e.value)
        with pytest.raises(chime.DisconnectedError):
            c.stats()


def test_info_and_stats(client):
    info = client.info()
    assert info["version"] == chime.__version__
    assert info["hostname"] and info["boot_id"]
    assert info["pin_host_memory"] is False
    tables = {t["name"]: t for t in info["tables"]}
    assert tables["hold"]["spec"].replace(" ", "") == "x:u8[256],id:u64[]"
    assert tables["hold"]["sample_bytes"] == 264
    assert tables["rt_shm"]["sampler"] == "fifo"
    assert tables["rt_shm"]["capacity"] == 100000
    with client.writer("misc") as w:
        w.extend(random_samples(3, seed=10))
    with client.stream("empty", batch_size=4, mode="stream") as s:
        st = client.stats()
        mine = [x for x in st["streams"] if x["table"] == "empty"]
        assert len(mine) == 1 and mine[0]["mode"] == "stream"
        assert s.stats()["stream_id"] == mine[0]["stream_id"]
        assert {r["stream_id"] for r in client.info()["rings"]} >= {
            mine[0]["stream_id"]}
    misc = {t["name"]: t for t in st["tables"]}["misc"]
    assert misc["inserts"] >= 3 and misc["size"] >= 3
    for k in ("ring_bytes_total", "pinned_bytes", "staged_insert_bytes",
              "staged_insert_budget", "insert_calls_parked"):
        assert isinstance(st[k], int)
    flat = client.stats(flat=True)
    assert flat["chime/misc/inserts"] == misc["inserts"]
    assert flat["chime/misc/size"] == misc["size"]
    assert "chime/misc/name" not in flat
    assert isinstance(flat["chime/ring_bytes_total"], int)
    assert isinstance(flat["chime/streams"], int)
    assert all(isinstance(v, (int, float)) for v in flat.values())


def _chimectl_json(cmd, addr):
    return json.loads(conftest.chimectl("--json", cmd, addr))


def _key_tree(v):
    """The keys of nested dicts (and of the dicts in lists), not values."""
    if isinstance(v, dict):
        return {k: _key_tree(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_key_tree(x) for x in v]
    return None


def test_info_and_stats_keys_are_chimectls(chimed, client):
    """info() and stats() have exactly the keys of `chimectl --json info`
    and `stats` for the same server (tables of every kind: a sequence
    table's "sequence" too, rings of open streams), as docs/python.md
    promises; stats() adds only its documented per-table "reuse"."""
    with client.stream("empty", batch_size=4, mode="stream"):
        want = _key_tree(_chimectl_json("info", chimed))
        got = _key_tree(client.info())
        assert want["rings"], "a ring to compare"
        assert got == want
        want = _key_tree(_chimectl_json("stats", chimed))
        got = _key_tree(client.stats())
        for t in got["tables"]:
            del t["reuse"]
        assert got == want
    t = {t["name"]: t for t in client.info()["tables"]}["heap"]
    assert (t["sampler"], t["remover"], t["max_times_sampled"],
            t["priority_exponent"], t["samples_per_insert"],
            t["error_buffer"]) == ("max_heap", "fifo", 1, 1.0, 0.0, 0.0)


def test_stats_reuse(client):
    # "reuse" is a lifo table with max_times_sampled 2: a batch of 8 drawn
    # one at a time takes the newest item twice, then the next: 4 items
    # leave, each sampled twice.
    with client.writer("reuse") as w:
        for x in range(1, 9):
            w.append({"x": x})
    with client.stream("reuse", batch_size=8, mode="stream", slots=2) as s:
        b = s.next(timeout=20.0)
        assert list(b["x"]) == [8, 8, 7, 7, 6, 6, 5, 5]
        b.release()
    t = {t["name"]: t for t in client.stats()["tables"]}["reuse"]
    assert t["left"] == 4 and t["size"] == 4
    assert t["reuse"] == 2.0


def test_mutate_priorities(client):
    with client.writer("heap") as w:
        for x in range(1, 11):
            w.append({"x": x}, priority=float(x))
    r = client.mutate_priorities("heap", keys=[3, 10, 999],
                                 priorities=[100.0, 0.5, 1.0],
                                 deletes=np.array([5, 6], np.uint64))
    assert r == {"updated": 2, "deleted": 2, "unknown": 1}
    with pytest.raises(chime.InvalidArgumentError):
        client.mutate_priorities("heap", keys=[4], priorities=[float("nan")])
    # Keys of any integer type (numpy int64 as from b.info["key"].astype,
    # int32, uint32); a negative one is refused by name, not wrapped.
    r = client.mutate_priorities("heap", keys=np.array([1], np.int64),
                                 priorities=[1.0],
                                 deletes=np.array([999], np.int32))
    assert r == {"updated": 1, "deleted": 0, "unknown": 1}
    r = client.mutate_priorities("heap", keys=np.array([2], np.uint32),
                                 priorities=[2.0])
    assert r == {"updated": 1, "deleted": 0, "unknown": 0}
    for keys, dels in (([-1], None), (np.array([4, -2], np.int64), None),
                       ([4], np.array([-3], np.int16))):
        with pytest.raises(chime.InvalidArgumentError, match="negative"):
            client.mutate_priorities("heap", keys=keys,
                                     priorities=[1.0] * len(keys),
                                     deletes=dels)
    with pytest.raises(TypeError, match="keys: .*integers"):
        client.mutate_priorities("heap", keys=[1.5], priorities=[1.0])
    with client.stream("heap", batch_size=8, mode="stream", slots=2) as s:
        b = s.next(timeout=20.0)
        assert list(b["x"]) == [3, 9, 8, 7, 4, 2, 1, 10]
        assert list(b.info["key"]) == [3, 9, 8, 7, 4, 2, 1, 10]
        b.release()


def test_sequence_windows(client):
    # Episode 1: 3 steps, one padded window. Episode 2: 6 steps, windows at
    # 0 and 2 (covered: no padded one). fifo: in the order they were made.
    with client.writer("seq") as w:
        for s in range(3):
            w.append({"t": 1, "s": s})
        w.end_episode()
        w.extend({"t": np.full(6, 2, np.uint32),
                  "s": np.arange(6, dtype=np.uint32)})
        w.end_episode()
    with client.stream("seq", batch_size=3, mode="stream", slots=2) as st:
        b = st.next(timeout=20.0)
        assert b["t"].shape == (3, 4) and b["mask"].shape == (3, 4)
        assert b["t"].tolist() == [[1, 1, 1, 0], [2, 2, 2, 2], [2, 2, 2, 2]]
        assert b["s"].tolist() == [[0, 1, 2, 0], [0, 1, 2, 3], [2, 3, 4, 5]]
        assert b["mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1],
                                      [1, 1, 1, 1]]
        assert list(b.info["first_step"]) == [0, 0, 2]
        assert list(b.info["length"]) == [3, 4, 4]
        e = b.info["episode_id"]
        assert e[0] != e[1] and e[1] == e[2]
        b.release()
    with client.writer("misc") as w:
        with pytest.raises(chime.InvalidArgumentError):
            w.end_episode()
    t = {t["name"]: t for t in client.info()["tables"]}["seq"]
    assert t["spec"] == "t:u32[4],s:u32[4],mask:u8[4]"
    q = t["sequence"]
    assert q["step_spec"] == "t:u32[],s:u32[]" and q["step_bytes"] == 8
    assert (q["sequence_length"], q["stride"], q["episode_end"],
            q["capacity_steps"], q["initial_priority"]) == (4, 2, "pad", 256,
                                                            1.0)
    t = {t["name"]: t for t in client.stats()["tables"]}["seq"]
    assert (t["steps"], t["steps_inserted"], t["episodes_open"]) == (9, 9, 0)
    assert t["step_bytes"] >= 256 * 8


def test_ctrl_c_interrupts_next(client):
    # next() waits without the GIL in short slices and checks for signals
    # between them: Ctrl-C (SIGINT) ends a wait on an empty table with
    # KeyboardInterrupt long before its timeout.
    with client.stream("empty", batch_size=4, mode="stream") as s:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            s.next(timeout=30.0)
        timer.join()
        assert time.monotonic() - t0 < 20.0


# A writer blocked on a full fifo table ("full": capacity 8, never
# sampled), in a process of its own: how it ends on SIGINT (Ctrl-C).
_BLOCKED_WRITER = r"""
import sys, numpy as np, chime
addr, how = sys.argv[1], sys.argv[2]
c = chime.Client(addr)
w = c.writer("full", timeout=30.0)
print("ready", flush=True)
try:
    if how == "with":
        with w:
            w.extend({"x": np.arange(200, dtype=np.uint64)})
    elif how == "flush":
        w.extend({"x": np.arange(40, dtype=np.uint64)})
        w.flush()
    else:
        w.extend({"x": np.arange(200, dtype=np.uint64)})
except KeyboardInterrupt as e:
    notes = " | ".join(getattr(e, "__notes__", []))
    print(f"interrupted acked={e.acked} taken={e.taken} notes={notes}",
          flush=True)
    raise
print("not interrupted", flush=True)
"""


@pytest.mark.parametrize("how", ["with", "plain", "flush"])
def test_ctrl_c_interrupts_blocked_writer(own_chimed, tmp_path, how):
    """extend/flush waiting for acks that cannot come (a full fifo table)
    end with KeyboardInterrupt soon after SIGINT, not after the writer's
    30 s timeout, say how many samples were acked, and the process exits
    at once (closing the interrupted writer does not wait again)."""
    proc, addr = own_chimed
    script = tmp_path / "blocked_writer.py"
    script.write_text(_BLOCKED_WRITER)
    child = subprocess.Popen(
        [sys.executable, str(script), addr, how], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert child.stdout.readline().strip() == "ready"
        # Blocked once the server holds an insert it has no room for.
        with chime.Client(addr) as c:
            deadline = time.monotonic() + 20
            while c.stats()["staged_insert_bytes"] == 0:
                assert time.monotonic() < deadline, "writer never blocked"
                time.sleep(0.02)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "KeyboardInterrupt" in err, err
    assert child.returncode == -signal.SIGINT, (child.returncode, err)
    # Liveness, not speed: far below the 30 s the writer would wait.
    assert took < 5.0, f"exited {took:.1f} s after SIGINT"
    m = re.search(r"interrupted acked=(\d+) taken=(\d+) notes=(.*)", out)
    assert m, out
    acked, taken = int(m.group(1)), int(m.group(2))
    # The table took 8 (one message of its capacity); the rest waits, and
    # extend stopped taking samples when its messages were all in flight.
    assert acked == 8
    assert taken == 40 if how == "flush" else 8 < taken < 200
    assert f"acked: the first {acked} of the {taken} samples" in m.group(3)


def test_info_shard_instance_and_mass(tmp_path):
    """info() has the server's shard and instance (the same on every call,
    another for another chimed) and each table's mass: a prioritized
    table's sum of priority^priority_exponent, another table's size."""
    tables = [{"name": "per", "spec": "x:u64[]", "capacity": 100,
               "sampler": "prioritized", "priority_exponent": 0.6},
              {"name": "uni", "spec": "x:u64[]", "capacity": 100,
               "sampler": "uniform"}]
    prio = [0.0 if i % 5 == 2 else 0.01 * 1.5 ** i for i in range(30)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with conftest.run_chimed(tmp_path / "a", tables, args=("--shard", "9")) \
            as (_, addr), chime.Client(addr) as c:
        info = c.info()
        assert info["shard"] == 9
        assert 0 < info["instance"] < 2 ** 63
        assert c.info()["instance"] == info["instance"]
        assert [t["mass"] for t in info["tables"]] == [0.0, 0.0]
        for name in ("per", "uni"):
            with c.writer(name) as w:
                w.extend({"x": np.arange(30, dtype=np.uint64)},
                         priorities=prio)
        t = {t["name"]: t for t in c.info()["tables"]}
        want = sum(p ** 0.6 for p in prio)
        assert t["per"]["mass"] == pytest.approx(want, rel=1e-9)
        assert t["uni"]["mass"] == t["uni"]["size"] == 30
        with conftest.run_chimed(tmp_path / "b", tables) as (_, addr2), \
                chime.Client(addr2) as c2:
            other = c2.info()
            assert other["shard"] == 0
            assert other["instance"] not in (0, info["instance"])


def test_token_option(tmp_path):
    """Client(token=...) is sent as a bearer token: a server with
    auth.tokens refuses a client without one and serves one with it."""
    tok = tmp_path / "admin.token"
    tok.write_text("s3cret-token-for-python\n")
    tables = [{"name": "t", "spec": "x:u64[]", "capacity": 10}]
    with conftest.run_chimed(tmp_path, tables,
                             extra={"auth": {"tokens": [
                                 {"file": str(tok), "role": "admin"}]}}) as (
                                     _, addr):
        with chime.Client(addr) as anon:
            with pytest.raises(chime.Error) as e:
                anon.info()
            assert "token" in str(e.value).lower() or "auth" in str(
                e.value).lower()
        with chime.Client(addr, token="s3cret-token-for-python") as c:
            assert c.info()["tables"][0]["name"] == "t"
        with pytest.raises(chime.InvalidArgumentError):
            chime.Client(addr, token="has a space")


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True,
                   timeout=60)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")
def test_tls_options(tmp_path):
    """Client(tls_ca=..., tls_server_name=...) talks TLS to a chimed with
    tls configured; without tls_ca the plaintext client is refused; a file
    that is not PEM is refused at once."""
    d = tmp_path
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             str(d / "ca.key"), "-out", str(d / "ca.pem"), "-days", "2",
             "-subj", "/CN=ca")
    (d / "srv.ext").write_text("subjectAltName=DNS:localhost\n"
                               "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             str(d / "srv.key"), "-out", str(d / "srv.csr"), "-subj",
             "/CN=localhost")
    _openssl("x509", "-req", "-in", str(d / "srv.csr"), "-CA",
             str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-out", str(d / "srv.pem"), "-days", "2",
             "-extfile", str(d / "srv.ext"))
    tables = [{"name": "t", "spec": "x:u64[]", "capacity": 10}]
    tls = {"tls": {"cert": str(d / "srv.pem"), "key": str(d / "srv.key")}}
    with conftest.run_chimed(tmp_path, tables, extra=tls) as (_, addr):
        with chime.Client(addr, tls_ca=str(d / "ca.pem"),
                          tls_server_name="localhost") as c:
            assert c.info()["tables"][0]["name"] == "t"
            with c.writer("t") as w:
                w.append({"x": 7})
            assert c.stats()["tables"][0]["inserts"] == 1
        with chime.Client(addr, timeout=2.0) as plain:
            with pytest.raises(chime.Error):
                plain.info()
        with pytest.raises(chime.InvalidArgumentError):
            chime.Client(addr, tls_ca=str(d / "srv.csr.missing"))


def test_error_codes_come_from_the_c_list():
    # Every CHIME_E* code is exported under its name, with the value the
    # C library names so (chime_err_name), and raises with that name.
    codes = {n: v for n, v in vars(chime).items()
             if n.startswith("E") and isinstance(v, int)}
    assert {"EINVAL", "ETIMEDOUT", "EBUSY", "EFORGOTTEN"} <= set(codes)
    for name, value in codes.items():
        assert value < 0
        with pytest.raises(chime.Error) as e:
            chime._chime._raise(value, "x")
        assert e.value.code == value and e.value.name == "CHIME_" + name
    assert len(set(codes.values())) == len(codes)
