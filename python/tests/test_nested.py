"""Ragged leaves as torch nested tensors (b.nested(leaf); skipped without
torch): one tensor per sample, its rows as written (0 rows and the bound
included, a fixed-shape rest kept, bf16 as bfloat16), a copy that outlives
the batch, while b.padded stays as it was; over two shards (a sharded
client's stream, fifo merged and uniform drawn, shm and stream mode) each
sample's nested rows, version and staleness are its own."""
import pathlib

import numpy as np
import pytest

import chime
import conftest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: apt-get install "
    "python3-torch; scripts/setup installs it)")

SPEC = ("tokens:i32[<=40], lp:f32[<=40 ~tokens], h:bf16[<=5,2], "
        "frames:u8[<=3,2,2], r:f32[]")
TABLES = [{"name": n, "spec": SPEC, "capacity": 1000, "sampler": s,
           "min_size": 1} for n, s in (("q", "fifo"), ("u", "uniform"))]
PER_SHARD = 24  # whole batches of 8: fifo delivers only full ones


def sample(i):
    n = 40 if i % 10 == 1 else (i * 7) % 41
    h = np.arange(i % 6 * 2, dtype=np.float32).reshape(i % 6, 2) + i
    return {"tokens": np.arange(n, dtype=np.int32) + 1000 * i,
            "lp": np.arange(n, dtype=np.float32) / 4 + i,
            # bf16 is its bits as uint16 in numpy: the top half of an f32's
            "h": (h.view(np.uint32) >> 16).astype(np.uint16),
            "frames": np.full((i % 4, 2, 2), i, dtype=np.uint8),
            "r": np.float32(i)}


def check(b):
    """Every ragged leaf's nested tensor against what was written."""
    ids = [int(r) for r in b["r"]]
    toks, lps, hs, frames = (b.nested(n) for n in ("tokens", "lp", "h",
                                                   "frames"))
    assert toks.is_nested and toks.dtype == torch.int32
    assert lps.dtype == torch.float32 and hs.dtype == torch.bfloat16
    assert frames.dtype == torch.uint8
    for j, (t, lp, h, f) in enumerate(zip(toks.unbind(), lps.unbind(),
                                          hs.unbind(), frames.unbind())):
        want = sample(ids[j])
        assert t.shape == (len(want["tokens"]),)
        assert torch.equal(t, torch.from_numpy(want["tokens"]))
        assert torch.equal(lp, torch.from_numpy(want["lp"]))
        assert h.shape == want["h"].shape
        wh = want["h"].astype(np.uint32) << 16
        assert torch.equal(h.float(), torch.from_numpy(wh.view(np.float32)))
        assert f.shape == want["frames"].shape
        assert torch.equal(f, torch.from_numpy(want["frames"]))
    return ids, toks


def write(addr, first, n, version=0):
    with chime.Client(addr) as c:
        for table in ("q", "u"):
            with c.writer(table, version=version) as w:
                for i in range(first, first + n):
                    w.append(sample(i))


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("chimed"),
                             tables=TABLES) as (proc, a):
        yield a
        assert proc.poll() is None, "chimed died during the tests"


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_nested_one_server(addr, mode):
    write(addr, 0, 16)
    with chime.Client(addr) as c, \
            c.stream("q", batch_size=8, mode=mode) as s:
        for _ in range(2):
            b = s.next(timeout=10)
            before = b.padded("tokens", value=-1)
            ids, toks = check(b)
            # padded as it was: [count, longest], the rest the value
            longest = max(len(sample(i)["tokens"]) for i in ids)
            assert before.shape == (8, longest)
            for j, i in enumerate(ids):
                n = len(sample(i)["tokens"])
                assert (before[j, n:] == -1).all()
                assert np.array_equal(before[j, :n], sample(i)["tokens"])
            b.release()
            # a copy: still readable once the slot went back
            assert b.released
            assert torch.equal(toks.unbind()[0],
                               torch.from_numpy(sample(ids[0])["tokens"]))


def test_nested_refuses_fixed_leaf(addr):
    write(addr, 100, 8)
    with chime.Client(addr) as c, \
            c.stream("q", batch_size=8, mode="shm") as s:
        with s.next(timeout=10) as b:
            with pytest.raises(chime.InvalidArgumentError):
                b.nested("r")
            with pytest.raises(KeyError):
                b.nested("nope")


def _dir(tmp_path, k):
    d = pathlib.Path(tmp_path) / f"shard{k}"
    d.mkdir()
    return d


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_nested_over_shards(tmp_path, mode):
    with conftest.run_chimed(_dir(tmp_path, 1), TABLES,
                             extra={"shard": 1}) as (_, a1), \
            conftest.run_chimed(_dir(tmp_path, 2), TABLES,
                                extra={"shard": 2}) as (_, a2):
        # shard k's samples 1000 k.., version k: staleness 0 on its own
        for k, a in ((1, a1), (2, a2)):
            write(a, 1000 * k, PER_SHARD, version=k)
        with chime.Client(f"{a1},{a2}") as c:
            seen = []
            with c.stream("q", batch_size=8, mode=mode) as s:
                while len(seen) < 2 * PER_SHARD:
                    with s.next(timeout=20) as b:
                        ids, _ = check(b)
                        assert list(b.info["version"]) == [
                            i // 1000 for i in ids]
                        assert (b.info["staleness"] == 0).all()
                        seen += ids
            assert sorted(seen) == sorted(
                1000 * k + i for k in (1, 2) for i in range(PER_SHARD))
            shards = set()
            with c.stream("u", batch_size=8, mode=mode) as s:
                for _ in range(40):
                    with s.next(timeout=20) as b:
                        ids, _ = check(b)
                        assert len({i // 1000 for i in ids}) == 1
                        assert list(b.info["version"]) == [
                            i // 1000 for i in ids]
                        shards.add(ids[0] // 1000)
            assert shards == {1, 2}
