"""chime.Client over two real chimed shards (config shard 1 and 2): the
target string goes to chime_client_create as given; info() and stats()
sum the shards; writers spread over them; mutate_priorities sends each
key to its shard; shards() lists each shard's address, number and instance
(and why one did not answer); key_shard reads a key's shard."""
import contextlib
import socket

import numpy as np
import pytest

import chime
import conftest

TABLES = [{"name": "t", "spec": "x:u64[]", "capacity": 1000,
           "sampler": "uniform", "min_size": 1}]
KEY_SHIFT = 48  # keys are shard << 48 | n, n from 1 per table


@pytest.fixture
def shards(tmp_path):
    """[address of shard 1, address of shard 2], fresh for each test."""
    with conftest.run_shards(tmp_path, TABLES) as addrs:
        yield addrs


@pytest.fixture
def refused():
    """An address that refuses connections: bound, never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield "127.0.0.1:%d" % s.getsockname()[1]


def insert(addr, n, first=0):
    with chime.Client(addr) as c, c.writer("t") as w:
        w.extend({"x": np.arange(first, first + n, dtype=np.uint64)})


def size(addr):
    with chime.Client(addr) as c:
        return c.info()["tables"][0]["size"]


def inserts(addr):
    with chime.Client(addr) as c:
        return c.stats()["tables"][0]["inserts"]


def instances(shards):
    out = []
    for a in shards:
        with chime.Client(a) as c:
            out.append(c.info()["instance"])
    return out


def test_shards_lists_every_shard(shards, refused):
    inst = instances(shards)
    with chime.Client(",".join(shards)) as c:
        assert c.shards() == [
            {"address": shards[0], "shard": 1, "instance": inst[0],
             "error": None},
            {"address": shards[1], "shard": 2, "instance": inst[1],
             "error": None}]
    with chime.Client(shards[1]) as c:  # one address: itself
        assert c.shards() == [
            {"address": shards[1], "shard": 2, "instance": inst[1],
             "error": None}]
    # One server at two addresses: one instance.
    with chime.Client(f"{shards[0]},ipv4:{shards[0]}") as c:
        assert [s["instance"] for s in c.shards()] == [inst[0]] * 2
    # One shard down: its entry says why, the others are still listed.
    with chime.Client(f"{shards[0]},{refused},{shards[1]}") as c:
        got = c.shards()
        assert [s["shard"] for s in got] == [1, None, 2]
        assert got[1]["address"] == refused and got[1]["instance"] is None
        assert "connect" in got[1]["error"]
        assert got[0]["error"] is None and got[2]["error"] is None


def test_info_and_stats_sum_the_shards(shards):
    insert(shards[0], 10)
    insert(shards[1], 20)
    with chime.Client(",".join(shards)) as c:
        t = c.info()["tables"][0]
        assert (t["name"], t["size"], t["capacity"]) == ("t", 30, 2000)
        st = c.stats()["tables"][0]
        assert (st["inserts"], st["size"]) == (30, 30)
    # The same through gRPC's ipv4: list form.
    with chime.Client("ipv4:" + ",".join(shards)) as c:
        assert c.info()["tables"][0]["size"] == 30
        assert [s["shard"] for s in c.shards()] == [1, 2]


def test_writers_spread_over_shards(shards):
    with chime.Client(",".join(shards)) as c:
        ws = [c.writer("t") for _ in range(4)]
        for i, w in enumerate(ws):
            w.extend({"x": np.arange(25, dtype=np.uint64) + 100 * i})
        for w in ws:
            w.close()
        assert c.stats()["tables"][0]["inserts"] == 100
    per = [inserts(a) for a in shards]
    assert sum(per) == 100
    assert min(per) > 0, f"every writer went to one shard: {per}"


def test_mutate_priorities_split_by_key_shard(shards):
    for a in shards:
        insert(a, 5)
    # Keys as each shard issued them, read from a batch of each.
    for n, a in enumerate(shards, 1):
        with chime.Client(a) as c, c.stream("t", batch_size=8) as s:
            b = s.next(timeout=10)
            keys = [int(k) for k in b.info["key"]]
            b.release()
        assert {chime.key_shard(k) for k in keys} == {n}
        assert set(keys) <= {n << KEY_SHIFT | i for i in range(1, 6)}
    k1 = [1 << KEY_SHIFT | i for i in (1, 2)]
    k2 = [2 << KEY_SHIFT | i for i in (1, 2)]
    with chime.Client(",".join(shards)) as c:
        r = c.mutate_priorities("t", keys=[k1[0], k2[0]],
                                priorities=[2.0, 3.0],
                                deletes=[k2[1], k1[1]])
        assert r == {"updated": 2, "deleted": 2, "unknown": 0}
        assert [size(a) for a in shards] == [4, 4]
        # A key of a shard the target does not name changes nothing.
        with pytest.raises(chime.InvalidArgumentError, match="shard 9"):
            c.mutate_priorities("t", keys=[k1[0]], priorities=[1.0],
                                deletes=[9 << KEY_SHIFT | 1])
        assert [size(a) for a in shards] == [4, 4]


def test_key_shard():
    assert chime.key_shard(3 << KEY_SHIFT | 5) == 3
    assert chime.key_shard(5) == 0  # an unsharded server's key
    assert chime.key_shard(2**64 - 1) == 65535
    assert chime.key_shard(np.uint64(7 << KEY_SHIFT | 1)) == 7
    with pytest.raises(OverflowError):
        chime.key_shard(-1)
    with pytest.raises(OverflowError):
        chime.key_shard(2**64)
    with pytest.raises(TypeError):
        chime.key_shard("1")


def test_writer_binds_to_a_live_shard(shards, refused):
    """A shard that is down does not fail Client.writer(): the spec comes
    from a shard that answers, and the C writer binds to a live one, as
    chime_writer_open does for C callers (it failed with the dead shard's
    error when the spec came from a GetInfo of every shard)."""
    for target in (f"{shards[0]},{refused}", f"{refused},{shards[0]}"):
        with chime.Client(target) as c, c.writer("t") as w:
            w.append({"x": 7})
            w.extend({"x": np.arange(3, dtype=np.uint64)})
            w.flush()
            assert w.acked == 4
    assert size(shards[0]) == 8
    # With every shard down: the first one's error, as before.
    with chime.Client(f"{refused},{refused}") as c:
        with pytest.raises(chime.Error) as e:
            c.writer("t")
        assert e.value.code == chime.EUNAVAILABLE
    # A table no live shard has is NotFoundError, not the dead one's error.
    with chime.Client(f"{refused},{shards[1]}") as c:
        with pytest.raises(chime.NotFoundError, match="nope"):
            c.writer("nope")


def test_writer_refuses_shards_that_differ(tmp_path):
    """Table "q" is x:u8[8] on shard 1 and x:u8[4096] on shard 2: opening a
    writer over both fails naming the shard that differs, whichever shard
    it would bind to. (The writer took its spec from the first shard that
    answered while the C writer bound to the other copied at that shard's
    size: reading past the caller's arrays, process memory into the
    table.) Over shards alike, the writer checks arrays against the spec
    its C writer copies at."""
    q = {1: "x:u8[8]", 2: "x:u8[4096]"}
    with contextlib.ExitStack() as stack:
        addrs = []
        for n in (1, 2):
            (tmp_path / str(n)).mkdir()
            tables = TABLES + [{"name": "q", "spec": q[n], "capacity": 100,
                                "sampler": "fifo"}]
            _, addr = stack.enter_context(
                conftest.run_chimed(tmp_path / str(n), tables, {"shard": n}))
            addrs.append(addr)
        with chime.Client(",".join(addrs)) as c:
            for _ in range(4):  # writers spread: each shard bound first
                with pytest.raises(chime.InvalidArgumentError,
                                   match="differs") as e:
                    c.writer("q")
                assert any(a in str(e.value) for a in addrs)
            with c.writer("t") as w:
                with pytest.raises(chime.InvalidArgumentError):
                    w.extend({"x": np.zeros((4, 8), dtype=np.uint8)})
                w.extend({"x": np.arange(4, dtype=np.uint64)})
                w.flush()
                assert w.acked == 4
