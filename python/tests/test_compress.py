"""Compressed leaves (docs/replay.md, "Compressed leaves") end to end: a
table keeping its frames zstd-compressed, a writer that sends them raw,
shm and stream learners that get exactly the bytes written (the sampler
decompresses into the slot), and stats that show the frames held at a
fraction of their raw size; a learner that keeps the frames compressed
(keep_compressed) gets each sample's zstd frame, which libzstd
decompresses to the sample, and stats() shows each compressed leaf's
bytes."""
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


def zstd_decompress(frame, size):
    """libzstd's own ZSTD_decompress (through ctypes: no binding needed)."""
    import ctypes
    import ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_char_p, ctypes.c_size_t]
    out = ctypes.create_string_buffer(size)
    src = bytes(frame)
    n = lib.ZSTD_decompress(out, size, src, len(src))
    assert n == size
    return np.frombuffer(out.raw, dtype=np.uint8)


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_keep_compressed(addr, mode):
    want = frames(32)
    with chime.Client(addr) as c:
        with c.writer("frames") as w:
            w.extend({"obs": want, "id": np.arange(32, dtype=np.uint32)})
        with c.stream("frames", batch_size=16, mode=mode,
                      keep_compressed=["obs"]) as s:
            for _ in range(2):
                b = s.next(timeout=20)
                raw, off = b["obs"], b.offsets("obs")
                assert raw.dtype == np.uint8 and len(off) == 17
                for j, i in enumerate(b["id"]):
                    frame = raw[off[j]:off[j + 1]]
                    assert len(frame) < 84 * 84  # a frame, not the leaf
                    got = zstd_decompress(frame, 84 * 84)
                    assert np.array_equal(got.reshape(84, 84), want[int(i)])


def test_keep_compressed_refused(addr):
    with chime.Client(addr) as c:
        for keep in ("id", "nope", ["obs", ""]):
            with pytest.raises(chime.InvalidArgumentError,
                               match="keep_compressed"):
                c.stream("frames", batch_size=4, keep_compressed=keep)


def test_leaf_bytes_in_stats(addr):
    with chime.Client(addr) as c:
        with c.writer("frames") as w:
            w.extend({"obs": frames(8), "id": np.arange(8, dtype=np.uint32)})
        st = [t for t in c.stats()["tables"] if t["name"] == "frames"][0]
        leaf = st["leaves"]["obs"]
        assert leaf["level"] == 3
        # every item held: the obs leaf raw is 84 * 84 bytes each
        assert leaf["raw_bytes"] == st["size"] * 84 * 84
        assert 0 < leaf["stored_bytes"] * 20 < leaf["raw_bytes"]
        # the table's stored bytes are its leaf's and the id's
        assert st["stored_bytes"] == leaf["stored_bytes"] + st["size"] * 4
        info = [t for t in c.info()["tables"] if t["name"] == "frames"][0]
        assert info["leaves"]["obs"]["level"] == 3
        assert info["leaves"]["obs"]["raw_bytes"] == info["size"] * 84 * 84
