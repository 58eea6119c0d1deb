"""Compressed leaves (docs/replay.md, "Compressed leaves") end to end: a
table keeping its frames zstd-compressed, a writer that sends them raw,
shm and stream learners that get exactly the bytes written (the sampler
decompresses into the slot), and stats that show the frames held at a
fraction of their raw size; a learner that keeps the frames compressed
(keep_compressed) gets each sample's zstd frame, which libzstd
decompresses to the sample, and stats() shows each compressed leaf's
bytes. Sequence tables too (docs/sequences.md, "Frames stored once"):
single frames as steps, windows of 4 over them, byte-identical to a raw
table's, through a checkpoint and --restore."""
import numpy as np
import pytest

import chime
import conftest

N = 256
TABLES = [{"name": "frames", "spec": "obs:u8[84,84], id:u32[]",
           "capacity": 1000, "sampler": "fifo", "compress": {"obs": 3}},
          {"name": "noise", "spec": "obs:u8[84,84], id:u32[]",
           "capacity": 1000, "sampler": "fifo", "compress": {"obs": 3}}]
# The frame stack as a window over single frames, compressed and raw.
SEQ = {"spec": "obs:u8[84,84], id:u32[]", "capacity_steps": 1000,
       "sequence_length": 4, "stride": 1, "episode_end": "pad",
       "sampler": "fifo"}
TABLES += [{"name": "zseq", **SEQ, "compress": {"obs": 3}},
           {"name": "rseq", **SEQ},
           {"name": "zpad", **SEQ, "compress": {"obs": 3}},
           {"name": "rpad", **SEQ}]
# A ragged leaf compressed at its length: an episode's frames, up to 8.
TABLES.append({"name": "zrag", "spec": "id:u32[], obs:u8[<=8,84,84]",
               "capacity": 100, "sampler": "fifo", "compress": {"obs": 3}})


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


def write_episodes(c, table, want):
    """Two episodes of the frames in want, halves, as steps; the writer
    compresses what the table does (the steps' obs), sending a fraction
    of the raw bytes."""
    h = len(want) // 2
    with c.writer(table) as w:
        for lo, hi in ((0, h), (h, len(want))):
            w.extend({"obs": want[lo:hi],
                      "id": np.arange(lo, hi, dtype=np.uint32)})
            w.end_episode()
        w.flush()
        if w.compress:
            assert w.compress == "obs:3"
            assert w.bytes_sent * 10 < len(want) * (84 * 84 + 4)
    return w.compress


def windows(c, table, n, mode, received=None):
    """The first n windows of table (fifo: in the order they were made);
    received[table], when given, the bytes the stream received."""
    got = {"obs": [], "id": [], "mask": []}
    with c.stream(table, batch_size=n, mode=mode) as s:
        b = s.next(timeout=20)
        for k in got:
            got[k] = np.array(b[k])
        b.release()
        if received is not None:
            received[table] = s.stats()["received_bytes"]
    return got


def check_windows(got, want):
    for w in range(len(got["id"])):
        for i in range(4):
            if got["mask"][w][i]:
                assert np.array_equal(got["obs"][w][i],
                                      want[int(got["id"][w][i])])
            else:
                assert not got["obs"][w][i].any()


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_sequence_windows_as_raw(addr, mode):
    want = frames(64)
    with chime.Client(addr) as c:
        assert write_episodes(c, "zseq", want) == "obs:3"
        assert write_episodes(c, "rseq", want) == ""
        z = windows(c, "zseq", 58, mode)  # 2 x 32 steps: 2 x 29 windows
        r = windows(c, "rseq", 58, mode)
        for k in z:
            assert np.array_equal(z[k], r[k]), k
        check_windows(z, want)
        info = {t["name"]: t for t in c.info()["tables"]}
        assert "obs:3" in str(info["zseq"]["compress"])
        st = {t["name"]: t for t in c.stats()["tables"]}
        # each frame held once, compressed; the raw table's held as is
        assert st["zseq"]["raw_bytes"] == st["rseq"]["raw_bytes"]
        assert st["zseq"]["stored_bytes"] * 20 < st["zseq"]["raw_bytes"]
        assert st["rseq"]["stored_bytes"] == st["rseq"]["raw_bytes"]


def test_sequence_padded_windows_stream(addr):
    """Episodes shorter than T make padded windows. In stream mode each
    window's compressed steps travel as stored (docs/protocol.md, "A
    window's frames") and the client decompresses them: the windows are
    the raw table's byte for byte, padded steps zero under a mask of 0,
    for far fewer bytes on the wire than the raw table's."""
    want = frames(9)
    got, received = {}, {}
    with chime.Client(addr) as c:
        for t in ("zpad", "rpad"):
            with c.writer(t) as w:
                # 2, 1 and 3 steps: one padded window each; then 3 more
                for lo, hi in ((0, 2), (2, 3), (3, 6), (6, 9)):
                    w.extend({"obs": want[lo:hi],
                              "id": np.arange(lo, hi, dtype=np.uint32)})
                    w.end_episode()
            got[t] = windows(c, t, 4, "stream", received)
    for k in got["zpad"]:
        assert np.array_equal(got["zpad"][k], got["rpad"][k]), k
    assert [list(m) for m in got["zpad"]["mask"]] == [
        [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]]
    check_windows(got["zpad"], want)
    # 11 real steps of 7,056 raw bytes: on the wire, a frame of each
    assert received["zpad"] * 10 < received["rpad"]


def test_sequence_checkpoint_restore(tmp_path):
    want = frames(40)
    extra = {"checkpoint": {"dir": str(tmp_path / "ckpt")}}
    tables = [{"name": "zseq", **SEQ, "compress": {"obs": 3}}]
    (tmp_path / "a").mkdir()
    with conftest.run_chimed(tmp_path / "a", tables, extra) as (_, addr):
        with chime.Client(addr, timeout=60) as c:
            write_episodes(c, "zseq", want)
            before = {t["name"]: t for t in c.stats()["tables"]}["zseq"]
            path = c.checkpoint()["path"]
    (tmp_path / "b").mkdir()
    # Back at another level: the steps' stored bytes kept as they were.
    tables[0]["compress"] = {"obs": 9}
    with conftest.run_chimed(tmp_path / "b", tables, extra,
                             args=("--restore", path)) as (_, addr):
        with chime.Client(addr, timeout=60) as c:
            after = {t["name"]: t for t in c.stats()["tables"]}["zseq"]
            for k in ("steps", "raw_bytes", "stored_bytes"):
                assert after[k] == before[k], k
            got = windows(c, "zseq", 34, "shm")  # 2 x 17
            assert list(got["id"][:, 0]) == list(range(17)) + \
                list(range(20, 37))
            check_windows(got, want)


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_ragged_frames(addr, mode):
    want = frames(8 * 9)
    with chime.Client(addr) as c:
        with c.writer("zrag") as w:
            for i in range(9):  # 0 to 8 frames
                w.append({"id": i, "obs": want[8 * i:8 * i + i]})
            # compressed by the writer, each sample's at its length
            w.flush()
            assert w.compress == "obs:3"
            assert w.bytes_sent * 10 < 36 * 84 * 84
        st = [t for t in c.stats()["tables"] if t["name"] == "zrag"][0]
        assert st["stored_bytes"] * 20 < st["raw_bytes"]
        with c.stream("zrag", batch_size=9, mode=mode) as s:
            b = s.next(timeout=20)
            off = b.offsets("obs")
            for j, i in enumerate(b["id"]):
                i = int(i)
                assert off[j + 1] - off[j] == i
                assert np.array_equal(b["obs"][off[j]:off[j + 1]],
                                      want[8 * i:8 * i + i])
            b.release()


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
