"""Device streams from Python (docs/python.md, Device streams) against the
fake libcudart the C tests build (no GPU, no torch): leaves are CUDA
DLPack exporters whose __dlpack__(stream=...) makes that stream wait for
the batch's copy, and host streams are unchanged. The scenario runs in a
process of its own (device_case.py), since the CUDA runtime is loaded
once per process."""
import contextlib
import os
import pathlib
import subprocess
import sys

import pytest

import conftest

HERE = pathlib.Path(__file__).resolve().parent
BUILD = pathlib.Path(os.environ.get(
    "CHIMED", conftest.ROOT / "build" / "src" / "server" / "chimed")
).resolve().parents[2]
FAKE = BUILD / "tests" / "fake_cudart" / "lib64" / "libcudart.so.13"
TABLES = [{"name": "dev", "spec": "x:f32[16], id:u64[]", "capacity": 4096,
           "sampler": "uniform", "min_size": 1},
          {"name": "rag", "spec": "tok:i32[<=8], id:u64[]",
           "capacity": 4096, "sampler": "uniform", "min_size": 1}]


@pytest.mark.parametrize("shards", [1, 2])
@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_device_stream_on_the_fake_runtime(tmp_path, mode, shards):
    """One chimed, or two shards of one service (a sharded client's device
    stream: a device sub-stream per shard)."""
    if not FAKE.exists():
        pytest.skip(f"{FAKE} is not built (the C tests build it)")
    log = tmp_path / "cuda.log"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_", "FAKE_CUDART_", "CHIME_CUDA"))}
    env.update(CHIME_CUDART=str(FAKE), FAKE_CUDART_LOG=str(log))
    with contextlib.ExitStack() as stack:
        addrs = []
        for k in range(1, shards + 1):
            d = tmp_path / f"shard{k}"
            d.mkdir()
            _, a = stack.enter_context(conftest.run_chimed(
                d, tables=TABLES, extra={"shard": k} if shards > 1 else None))
            addrs.append(a)
        r = subprocess.run([sys.executable, str(HERE / "device_case.py"),
                            ",".join(addrs), str(FAKE), mode, str(log)],
                           env=env, capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ok")


def test_device_argument_checked(client):
    import chime
    with pytest.raises(chime.InvalidArgumentError, match="cuda:N"):
        client.stream("misc", 4, device="gpu0")
    with pytest.raises(chime.InvalidArgumentError, match="ordinal"):
        client.stream("misc", 4, device=-5)
    # A bool is an int to Python, but False is no device 0 (nor True 1).
    for b in (False, True):
        with pytest.raises(chime.InvalidArgumentError, match="bool"):
            client.stream("misc", 4, device=b)
