"""Ragged leaves from Python (docs/replay.md, "Ragged leaves"): append takes
arrays of any length up to the bound, b[leaf] is the values [total, *rest],
b.offsets(leaf) the [count + 1] offsets, b.samples(leaf) per-sample views
and b.padded(leaf) a padded copy on request; shm and stream mode give the
same; too long or unlike a shared length is refused, nothing inserted."""
import numpy as np
import pytest

import chime
import conftest

SPEC = "tokens:i32[<=50], lp:f32[<=50 ~tokens], frames:u8[<=3,2,2], r:f32[]"
TABLES = [{"name": n, "spec": SPEC, "capacity": 1000, "sampler": "fifo",
           "min_size": 1} for n in ("rag_shm", "rag_stream", "rag_bad")]


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("chimed"),
                             tables=TABLES) as (proc, a):
        yield a
        assert proc.poll() is None, "chimed died during the tests"


def sample(i):
    n = 50 if i == 1 else (i * 7) % 51
    return {"tokens": np.arange(n, dtype=np.int32) + 1000 * i,
            "lp": np.arange(n, dtype=np.float32) / 4 + i,
            "frames": np.full((i % 4, 2, 2), i, dtype=np.uint8),
            "r": np.float32(i)}


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_round_trip(addr, mode):
    table = "rag_" + mode
    n, batch = 24, 8
    with chime.Client(addr) as c:
        with c.writer(table) as w:
            for i in range(n):
                w.append(sample(i))
        with c.stream(table, batch_size=batch, mode=mode) as s:
            assert s.mode == mode
            for first in range(0, n, batch):
                with s.next(timeout=10) as b:
                    tok, off = b["tokens"], b.offsets("tokens")
                    assert off.dtype == np.int64 and off.shape == (batch + 1,)
                    assert off[0] == 0 and tok.shape == (off[-1],)
                    assert b["frames"].shape[1:] == (2, 2)
                    assert np.array_equal(b.offsets("lp"), off)
                    assert b["r"].shape == (batch,)
                    toks = b.samples("tokens")
                    frames = b.samples("frames")
                    assert len(toks) == batch
                    for j in range(batch):
                        want = sample(first + j)
                        assert np.array_equal(toks[j], want["tokens"])
                        assert np.array_equal(
                            b["lp"][off[j]:off[j + 1]], want["lp"])
                        assert np.array_equal(frames[j], want["frames"])
                        assert b["r"][j] == first + j
                    pad = b.padded("tokens", value=-1)
                    longest = int(np.diff(off).max())
                    assert pad.shape == (batch, longest)
                    assert pad.flags.writeable  # a copy, not the ring
                    for j in range(batch):
                        k = off[j + 1] - off[j]
                        assert np.array_equal(pad[j, :k], toks[j])
                        assert (pad[j, k:] == -1).all()
                    assert b.padded("frames", length=3).shape == (batch, 3, 2,
                                                                  2)
                    with pytest.raises(ValueError):
                        b.padded("tokens", length=longest - 1)
                    with pytest.raises(chime.InvalidArgumentError):
                        b.offsets("r")
                    del tok, off, toks, frames, pad


def test_refused_nothing_inserted(addr):
    with chime.Client(addr) as c:
        with c.writer("rag_bad") as w:
            bad = sample(3)
            bad["tokens"] = np.zeros(51, dtype=np.int32)
            bad["lp"] = np.zeros(51, dtype=np.float32)
            with pytest.raises(chime.InvalidArgumentError, match="bound"):
                w.append(bad)
            unlike = sample(3)
            unlike["lp"] = unlike["lp"][:-1]
            with pytest.raises(chime.InvalidArgumentError,
                               match="share a length"):
                w.append(unlike)
            with pytest.raises(chime.InvalidArgumentError, match="ragged"):
                w.extend({k: np.stack([v, v]) for k, v in sample(0).items()})
            w.flush()
            assert w.acked == 0
        info = {t["name"]: t for t in c.info()["tables"]}
        assert info["rag_bad"]["size"] == 0
