"""python/bench.py runs and reports its ratios (a smoke test: one short
round; no figure is judged here, the machine is shared)."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bench_runs():
    build = pathlib.Path(os.environ.get(
        "CHIMED", ROOT / "build/src/server/chimed")).resolve().parents[2]
    p = subprocess.run(
        [sys.executable, str(ROOT / "python/bench.py"), "--build", str(build),
         "--runs", "1", "--seconds", "0.2", "--ingest-scale", "0.05",
         "--json"], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    cases = [(r["case"], r.get("batch_mib")) for r in rows]
    assert cases == [("learn", 1), ("learn", 16), ("batch", None),
                     ("ingest", None)]
    for r in rows:
        for k, v in r.items():
            if k.endswith("ratio") or k.endswith("_us"):
                assert v > 0, (k, r)
