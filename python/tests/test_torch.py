"""The package with torch (Debian python3-torch; skipped without it):
torch.from_dlpack(batch["leaf"]) shares the ring's memory and holds the
batch, for whole leaves and their slices, and
examples/python/learner_torch.py runs end to end."""
import gc
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import chime
from test_chime import LEAVES, fill_hold, random_samples

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: apt-get install "
    "python3-torch; scripts/setup installs it)")

ROOT = pathlib.Path(__file__).resolve().parents[2]
# torch 1.13 has no uint16/32/64 and does not take DLPack's bool (code 6).
TORCH_DTYPES = {"u8": torch.uint8, "i8": torch.int8, "i16": torch.int16,
                "i32": torch.int32, "i64": torch.int64,
                "f16": torch.float16, "bf16": torch.bfloat16,
                "f32": torch.float32, "f64": torch.float64}
SPEC_DTYPES = {"a": "u8", "b": "i8", "d": "i16", "f": "i32", "g": "i64",
               "h": "f16", "k": "bf16", "m": "f32", "n": "f64"}


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_from_dlpack_shares_the_ring(client, mode):
    samples = random_samples(4, seed=21)
    with client.writer("misc") as w:
        w.extend(samples)
    with client.stream("misc", batch_size=4, mode=mode) as s:
        assert s.mode == mode
        b = s.next(timeout=10)
        tensors = {}
        for name, dt, shape in LEAVES:
            if name not in SPEC_DTYPES:
                continue
            # verbatim: the array itself, read-only, exports
            a = b[name]
            assert isinstance(a, np.ndarray) and not a.flags.writeable
            t = torch.from_dlpack(a)
            addr = a.__array_interface__["data"][0]
            del a
            assert t.data_ptr() == addr, name
            # and through the exporter behind it, the same
            assert torch.from_dlpack(b.view(name)).data_ptr() == addr
            assert t.dtype == TORCH_DTYPES[SPEC_DTYPES[name]]
            assert tuple(t.shape) == (4,) + shape
            # the same bytes as were inserted (bf16 compared as its bits)
            raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
            assert raw.numpy().tobytes() == \
                np.ascontiguousarray(samples[name]).tobytes()
            tensors[name] = t
        del t, raw
        # a tensor holds the batch as an array does
        b.release()
        assert not b.released
        gc.collect()
        assert not b.released
        before = tensors["m"].clone()
        for _ in range(3):
            with client.writer("misc") as w:
                w.extend(random_samples(4, seed=22))
            s.next(timeout=10).release()
        assert torch.equal(tensors["m"], before)
        tensors.clear()
        gc.collect()
        assert b.released


def test_tensor_outlives_300_batches(client):
    """A tensor of batch["x"] keeps its slot leased: with 3 slots a fifo
    ring reuses a slot every two batches, so without the hold its bytes
    would change many times over."""
    x = fill_hold(client, 2 * 302, seed=31)
    with client.stream("hold", batch_size=2, slots=3, mode="shm") as s:
        assert s.mode == "shm"
        first = s.next(timeout=10)
        t = torch.from_dlpack(first["x"])
        tid = torch.from_dlpack(first["id"].view(np.int64)[:])  # no u64
        expect = x[tid.numpy()]
        assert np.array_equal(t.numpy(), expect)
        for _ in range(300):
            b = s.next(timeout=10)
        del b
        assert not first.released
        assert np.array_equal(t.numpy(), expect)
        assert np.array_equal(x[tid.numpy()], expect)
        del tid
        gc.collect()
        assert not first.released  # t still holds it
        del t
        gc.collect()
        assert first.released
        with pytest.raises(chime.Error):
            first["x"]


def test_slice_exports_what_it_shows(client):
    samples = random_samples(4, seed=32)
    with client.writer("misc") as w:
        w.extend(samples)
    with client.stream("misc", batch_size=4, mode="shm") as s:
        b = s.next(timeout=10)
        m = b["m"]                       # f32 [4, 2, 3]
        for sl in (m[1:], m[:, 1], m[::2, :, 1:], m[2, 1], m.T, m[3:4],
                   m.reshape(4, 6)[:, ::3], m[1:1]):
            t = torch.from_dlpack(sl)
            if sl.size:  # torch gives an empty tensor no address
                assert t.data_ptr() == sl.__array_interface__["data"][0]
            assert tuple(t.shape) == sl.shape
            assert tuple(t.stride()) == tuple(
                st // sl.itemsize for st in sl.strides)
            assert t.numpy().tobytes() == sl.tobytes()
        # a slice of a bf16 leaf is still bfloat16; a dtype view is not
        k = b["k"]
        assert torch.from_dlpack(k[1:]).dtype == torch.bfloat16
        assert torch.from_dlpack(k.view(np.int16)).dtype == torch.int16
        # a reversed slice would abort torch 1.13: refused instead
        with pytest.raises(BufferError, match="negative"):
            m[::-1].__dlpack__()
        # a u8 view with strides that are not a multiple of u16's size
        odd = b["a"][:, :, :4].view(np.uint16)
        assert odd.strides[1] % 2 == 1
        with pytest.raises(BufferError):
            odd.__dlpack__()
        # results of arithmetic are plain numpy, not batch memory
        assert type(m * 2) is np.ndarray and type(m.sum(0)) is np.ndarray
        assert isinstance(m.sum(), np.floating)
        # a slice's tensor holds the batch: the release waits for it
        t = torch.from_dlpack(b["n"][1:])
        before = t.clone()
        del m, k, odd, sl
        gc.collect()
        b.release()
        assert not b.released
        for _ in range(3):
            with client.writer("misc") as w:
                w.extend(random_samples(4, seed=33))
            s.next(timeout=10).release()
        assert torch.equal(t, before)
        del t
        gc.collect()
        assert b.released


def test_learner_torch_example():
    run_dir = tempfile.mkdtemp(prefix="chime-ex-")
    try:
        p = subprocess.run(
            [sys.executable, str(ROOT / "examples/python/learner_torch.py"),
             "--run-dir", run_dir, "--updates", "50", "--actors", "2",
             "--log-every", "10"],
            capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
        assert out["updates"] == 50 and out["mode"] == "shm"
        assert np.isfinite(out["loss_first"]) and np.isfinite(out["loss_last"])
        assert out["chime"]["chime/transitions/samples"] >= 50 * 256
        assert "update 50:" in p.stderr
        # the learner owned the server: it is gone with it
        assert chime.server_state("chime-example", run_dir=run_dir) is None
        log = pathlib.Path(run_dir, "chime-example.log").read_text()
        assert "exited with 0" in log
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def test_mutate_priorities_takes_int64_tensors(client):
    """Keys as torch int64 tensors (what torch code holds): taken, and a
    negative one refused by name. An unsharded table's keys are 1, 2, ...
    in insert order (this module's only use of "heap")."""
    with client.writer("heap") as w:
        w.append({"x": 1}, priority=1.0)
        w.append({"x": 2}, priority=1.0)
    r = client.mutate_priorities("heap", keys=torch.tensor([1]),
                                 priorities=torch.tensor([3.0]),
                                 deletes=torch.tensor([2], dtype=torch.int64))
    assert r == {"updated": 1, "deleted": 1, "unknown": 0}
    with pytest.raises(chime.InvalidArgumentError, match="negative"):
        client.mutate_priorities("heap", keys=torch.tensor([-1]),
                                 priorities=[1.0])
