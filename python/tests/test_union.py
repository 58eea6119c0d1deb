"""A sharded client's stream from Python: the same `c.stream(...)` over
three chimed (shards 1, 2, 3), every batch from one shard and each item's
info["probability"] its probability in the union of the shards, as one
table holding every item would give it."""
import numpy as np
import pytest

import chime
import conftest

EXPONENT = 0.8
SIZES = (20, 60, 120)
TABLES = [{"name": "uni", "spec": "x:u64[]", "capacity": 1000,
           "sampler": "uniform"},
          {"name": "pri", "spec": "x:u64[]", "capacity": 1000,
           "sampler": "prioritized", "priority_exponent": EXPONENT}]


def prio(k, i):
    return (1 + i % 7) * (5.0 if k == 1 else 1.0)


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_sharded_stream_union_probability(tmp_path, mode):
    addrs = []
    with conftest.run_chimed(_dir(tmp_path, 1), TABLES,
                             extra={"shard": 1}) as (_, a1), \
            conftest.run_chimed(_dir(tmp_path, 2), TABLES,
                                extra={"shard": 2}) as (_, a2), \
            conftest.run_chimed(_dir(tmp_path, 3), TABLES,
                                extra={"shard": 3}) as (_, a3):
        addrs = [a1, a2, a3]
        for k, (addr, n) in enumerate(zip(addrs, SIZES), start=1):
            with chime.Client(addr) as one:
                x = (np.uint64(k) << np.uint64(32)) + np.arange(
                    n, dtype=np.uint64)
                for table in ("uni", "pri"):
                    with one.writer(table) as w:
                        w.extend({"x": x},
                                 priorities=[prio(k, i) for i in range(n)])
        weight = {(k, i): prio(k, i) ** EXPONENT
                  for k, n in enumerate(SIZES, start=1) for i in range(n)}
        pri_total = sum(weight.values())
        with chime.Client(",".join(addrs)) as c:
            for table in ("uni", "pri"):
                shards = set()
                with c.stream(table, batch_size=4, mode=mode) as s:
                    assert s.mode == mode
                    for _ in range(150):
                        b = s.next(timeout=20)
                        x = [int(v) for v in b["x"]]
                        k = x[0] >> 32
                        assert all(v >> 32 == k for v in x)
                        # keys carry their shard in their top 16 bits
                        assert all(int(key) >> 48 == k
                                   for key in b.info["key"])
                        shards.add(k)
                        for v, p in zip(x, b.info["probability"]):
                            i = v & 0xffffffff
                            want = (1 / sum(SIZES) if table == "uni"
                                    else weight[(k, i)] / pri_total)
                            assert p == pytest.approx(want, rel=1e-9)
                        b.release()
                assert shards == {1, 2, 3}


def _dir(tmp_path, k):
    d = tmp_path / f"shard{k}"
    d.mkdir()
    return d


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_hung_shard_set_aside(tmp_path, mode):
    """One of three shards stopped (SIGSTOP: a GC pause, a partition
    without a reset) is set aside: the union learner goes on drawing from
    the two that answer, each probability exact within them (1 / their
    items for a uniform table), and stats() says so; once the shard
    answers again it is drawn again. (The learner used to wait on the
    stopped shard, drawn by its last mass, for as long as it was
    stopped.)"""
    import os
    import signal
    with conftest.run_chimed(_dir(tmp_path, 1), TABLES,
                             extra={"shard": 1}) as (_, a1), \
            conftest.run_chimed(_dir(tmp_path, 2), TABLES,
                                extra={"shard": 2}) as (p2, a2), \
            conftest.run_chimed(_dir(tmp_path, 3), TABLES,
                                extra={"shard": 3}) as (_, a3):
        for k, (addr, n) in enumerate(zip((a1, a2, a3), SIZES), start=1):
            with chime.Client(addr) as one, one.writer("uni") as w:
                w.extend({"x": (np.uint64(k) << np.uint64(32)) +
                          np.arange(n, dtype=np.uint64)})
        with chime.Client(f"{a1},{a2},{a3}", timeout=2.0) as c, \
                c.stream("uni", batch_size=4, mode=mode) as s:
            os.kill(p2.pid, signal.SIGSTOP)
            try:
                answering = SIZES[0] + SIZES[2]
                after = 0
                for _ in range(2000):
                    b = s.next(timeout=20)
                    k = int(b["x"][0]) >> 32
                    if s.stats()["shards_aside"] == 1:
                        # from the shards that answer, at their share
                        assert k in (1, 3)
                        for p in b.info["probability"]:
                            assert p == pytest.approx(1 / answering,
                                                      rel=1e-9)
                        after += 1
                        if after == 300:
                            break
                assert after == 300, "the stopped shard was never set aside"
                assert s.stats()["shard_asides"] >= 1
            finally:
                os.kill(p2.pid, signal.SIGCONT)
            # Drawn again once it answers.
            seen2 = False
            for _ in range(20000):
                b = s.next(timeout=20)
                if int(b["x"][0]) >> 32 == 2:
                    seen2 = True
                    break
            assert seen2
            assert s.stats()["shards_aside"] == 0
