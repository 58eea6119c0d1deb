"""The package with torch (Debian python3-torch; skipped without it):
torch.from_dlpack on a batch's views shares the ring's memory, and
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
from test_chime import LEAVES, random_samples

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
            t = torch.from_dlpack(b.view(name))
            addr = b[name].__array_interface__["data"][0]
            assert t.data_ptr() == addr, name
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
