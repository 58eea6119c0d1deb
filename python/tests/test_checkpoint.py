"""Client.checkpoint() against a real chimed with a checkpoint dir: the
result's fields, a restart that restores it, and the error without a
dir."""
import os

import numpy as np
import pytest

import chime
import conftest

TABLES = [{"name": "f", "spec": "x:u64[], y:u8[48]", "capacity": 20000,
           "sampler": "fifo", "min_size": 1},
          {"name": "u", "spec": "x:u64[]", "capacity": 100,
           "sampler": "uniform", "min_size": 1}]
N = 1000


def sizes(c):
    return {t["name"]: t["size"] for t in c.info()["tables"]}


def test_checkpoint_and_restore(tmp_path):
    ckpt = tmp_path / "ckpt"
    extra = {"checkpoint": {"dir": str(ckpt), "keep": 3}}
    x = np.arange(N, dtype=np.uint64)
    y = np.random.default_rng(41).integers(0, 256, size=(N, 48),
                                           dtype=np.uint8)
    (tmp_path / "a").mkdir()
    with conftest.run_chimed(tmp_path / "a", TABLES, extra) as (_, addr):
        with chime.Client(addr, timeout=60) as c:
            with c.writer("f") as w:
                w.extend({"x": x, "y": y})
            with c.writer("u") as w:
                w.extend({"x": x[:10]})
            r = c.checkpoint()
            assert set(r) == {"path", "tables", "items", "bytes",
                              "pause_ns", "duration_ns"}
            assert r["tables"] == 2 and r["items"] == N + 10
            assert r["bytes"] >= N * (8 + 48)
            assert 0 <= r["pause_ns"] <= r["duration_ns"]
            assert os.path.dirname(r["path"]) == str(ckpt)
            assert os.path.exists(os.path.join(r["path"], "DONE"))
            # a second one is another directory
            r2 = c.checkpoint()
            assert r2["path"] != r["path"] and r2["items"] == N + 10
    (tmp_path / "b").mkdir()
    with conftest.run_chimed(tmp_path / "b", TABLES, extra,
                             args=("--restore", r["path"])) as (_, addr):
        with chime.Client(addr, timeout=60) as c:
            assert sizes(c) == {"f": N, "u": 10}
            with c.stream("f", batch_size=N, mode="shm") as s:
                b = s.next(timeout=10)
                assert np.array_equal(b["x"], x)  # fifo: in insert order
                assert np.array_equal(b["y"], y)


def test_checkpoint_without_dir(tmp_path):
    with conftest.run_chimed(tmp_path, TABLES) as (_, addr):
        with chime.Client(addr) as c:
            with pytest.raises(chime.InvalidArgumentError,
                               match="checkpoint dir") as e:
                c.checkpoint()
            assert e.value.name == "CHIME_EINVAL"
        with pytest.raises(chime.Error):
            c.checkpoint()  # a closed client
