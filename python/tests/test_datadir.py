"""A table in files (table "data_dir") from Python: items written, chimed
killed with SIGKILL, a new chimed on the same data dir hands out the same
items in the same order, with no checkpoint (docs/operations.md, "Tables
in files"), a compressed leaf too; info() names the data dir and, as
stats() does, the bytes its files hold on disk."""
import numpy as np
import pytest

import chime
import conftest

N = 1000


# Compressed: y's bytes in the bytes file (docs/operations.md).
@pytest.mark.parametrize("extra", [{}, {"compress": {"y": 3}}])
def test_kill9_then_reopen(tmp_path, extra):
    tables = [{"name": "f", "spec": "x:u64[], y:u8[48]", "capacity": 4096,
               "sampler": "fifo", "min_size": 1,
               "data_dir": str(tmp_path / "data"), **extra}]
    x = np.arange(N, dtype=np.uint64)
    y = np.random.default_rng(43).integers(0, 256, size=(N, 48),
                                           dtype=np.uint8)
    (tmp_path / "a").mkdir()
    with conftest.run_chimed(tmp_path / "a", tables) as (proc, addr):
        with chime.Client(addr, timeout=60) as c:
            with c.writer("f") as w:
                w.extend({"x": x, "y": y})  # acked when the block ends
        proc.kill()
        proc.wait()
    (tmp_path / "b").mkdir()
    with conftest.run_chimed(tmp_path / "b", tables) as (_, addr):
        with chime.Client(addr, timeout=60) as c:
            assert [t["size"] for t in c.info()["tables"]] == [N]
            assert [t["data_dir"] for t in c.info()["tables"]] == [
                str(tmp_path / "data")]
            # Allocated blocks: the whole .table file (posix_fallocate),
            # and the .bytes file's when there is one.
            disk = sum(p.stat().st_blocks * 512
                       for p in (tmp_path / "data").iterdir())
            assert disk > 0
            assert c.info()["tables"][0]["disk_bytes"] == disk
            assert c.stats()["tables"][0]["disk_bytes"] == disk
            with c.stream("f", batch_size=N, mode="shm") as s:
                b = s.next(timeout=10)
                assert np.array_equal(b["x"], x)  # fifo: in insert order
                assert np.array_equal(b["y"], y)


# Compressed: the steps' x in the bytes file (docs/operations.md).
@pytest.mark.parametrize("extra", [{}, {"compress": {"x": 3}}])
def test_sequence_kill9_then_reopen(tmp_path, extra):
    """A sequence table in files: episodes written, chimed killed with
    SIGKILL, a new chimed on the data dir hands out every window in the
    order it was made, each its episode's steps (docs/operations.md)."""
    tables = [{"name": "q", "spec": "t:u32[], s:u32[], x:f32[8]",
               "capacity_steps": 4096, "sequence_length": 4, "stride": 2,
               "episode_end": "pad", "sampler": "fifo", "min_size": 1,
               "data_dir": str(tmp_path / "data"), **extra}]
    lens = [3, 9, 20, 6, 11]  # windows: 1, 4, 9, 2, 5 (padded tails)
    (tmp_path / "a").mkdir()
    with conftest.run_chimed(tmp_path / "a", tables) as (proc, addr):
        with chime.Client(addr, timeout=60) as c:
            with c.writer("q") as w:
                for tag, n in enumerate(lens, 1):
                    s = np.arange(n, dtype=np.uint32)
                    w.extend({"t": np.full(n, tag, np.uint32), "s": s,
                              "x": (tag * 100 + s[:, None]
                                    + np.arange(8)).astype(np.float32)})
                    w.end_episode()
            size = c.info()["tables"][0]["size"]
        proc.kill()
        proc.wait()
    assert size == 21
    (tmp_path / "b").mkdir()
    with conftest.run_chimed(tmp_path / "b", tables) as (_, addr):
        with chime.Client(addr, timeout=60) as c:
            assert c.info()["tables"][0]["size"] == size
            assert c.info()["tables"][0]["disk_bytes"] > 0
            with c.stream("q", batch_size=size, mode="shm") as st:
                b = st.next(timeout=10)
                tags = b["t"][:, 0].tolist()
                assert tags == sorted(tags)  # fifo: in the order made
                for j in range(size):
                    n, f = b.info["length"][j], b.info["first_step"][j]
                    tag = tags[j]
                    assert b["t"][j, :n].tolist() == [tag] * n
                    assert b["s"][j, :n].tolist() == list(range(f, f + n))
                    assert np.array_equal(
                        b["x"][j, :n], (tag * 100 + np.arange(f, f + n)[:, None]
                                        + np.arange(8)).astype(np.float32))
                    assert b["mask"][j].tolist() == [1] * n + [0] * (4 - n)
