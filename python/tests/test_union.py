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
