"""Compressed leaves (docs/replay.md, "Compressed leaves") end to end: a
table keeping its frames zstd-compressed, a writer that sends them raw,
shm and stream learners that get exactly the bytes written (the sampler
decompresses into the slot), and stats that show the frames held at a
fraction of their raw size."""
import numpy as np
import pytest

import chime
import conftest

N = 256
TABLES = [{"name": "frames", "spec": "obs:u8[84,84], id:u32[]",
           "capacity": 1000, "sampler": "fifo", "compress": {"obs": 3}},
          {"name": "noise", "spec": "obs:u8[84,84], id:u32[]",
           "capacity": 1000, "sampler": "fifo", "compress": {"obs": 3}}]


def frames(n):
    """Frames like a simple game's: flat background, two moving boxes."""
    f = np.full((n, 84, 84), 40, dtype=np.uint8)
    for i in range(n):
        f[i, 10 + i % 60:18 + i % 60, 5:13] = 200
        f[i, 70:74, (3 * i) % 76:(3 * i) % 76 + 8] = 120
    return f


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("z"), TABLES) as (_, a):
        yield a


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_frames_round_trip(addr, mode):
    want = frames(N)
    with chime.Client(addr) as c:
        with c.writer("frames") as w:
            w.extend({"obs": want, "id": np.arange(N, dtype=np.uint32)})
        info = [t for t in c.info()["tables"] if t["name"] == "frames"][0]
        assert "obs" in str(info["compress"])
        st = [t for t in c.stats()["tables"] if t["name"] == "frames"][0]
        # held at a fraction of raw: the frames compress over 20x
        assert st["stored_bytes"] * 20 < st["raw_bytes"]
        seen = 0
        with c.stream("frames", batch_size=16, mode=mode) as s:
            assert s.mode == mode
            while seen < N:
                b = s.next(timeout=20)
                for j, i in enumerate(b["id"]):
                    assert np.array_equal(b["obs"][j], want[int(i)])
                seen += len(b["id"])


def test_noise_stored_raw(addr):
    rng = np.random.default_rng(7)
    want = rng.integers(0, 256, size=(32, 84, 84), dtype=np.uint8)
    with chime.Client(addr) as c:
        with c.writer("noise") as w:
            w.extend({"obs": want, "id": np.arange(32, dtype=np.uint32)})
        st = [t for t in c.stats()["tables"] if t["name"] == "noise"][0]
        assert st["leaves_stored_raw"] == 32
        # a few bytes a sample over raw, never more
        assert st["stored_bytes"] <= st["raw_bytes"] + 32 * 8
        with c.stream("noise", batch_size=32) as s:
            b = s.next(timeout=20)
            for j, i in enumerate(b["id"]):
                assert np.array_equal(b["obs"][j], want[int(i)])


@pytest.mark.parametrize("compress", [True, False])
def test_writer_compresses(addr, compress):
    """The writer compresses what the table does (Client.writer goes
    through the C writer) and sends a fraction of the raw bytes; with
    compress=False it sends them raw and chimed compresses: the same
    frames held, and read back as written either way."""
    want = frames(N)
    with chime.Client(addr) as c:
        with c.writer("frames", compress=compress) as w:
            assert w.compress == ("obs:3" if compress else "")
            w.extend({"obs": want, "id": np.arange(N, dtype=np.uint32)})
            w.flush()
            sent = w.bytes_sent
        assert w.bytes_sent == sent  # kept after close
        raw = N * (84 * 84 + 4)
        if compress:
            assert sent * 10 < raw
        else:
            assert sent >= raw
        st = [t for t in c.stats()["tables"] if t["name"] == "frames"][0]
        assert st["stored_bytes"] * 20 < st["raw_bytes"]
        seen = 0
        with c.stream("frames", batch_size=16) as s:
            while seen < N:
                b = s.next(timeout=20)
                for j, i in enumerate(b["id"]):
                    assert np.array_equal(b["obs"][j], want[int(i)])
                seen += len(b["id"])
