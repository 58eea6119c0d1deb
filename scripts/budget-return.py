#!/usr/bin/env python3
"""How soon a closed shm stream's ring budget comes back to chimed: opens
an shm stream, takes and releases a batch, closes it, and polls Stats'
ring_bytes_total until it is 0 (chimed's liveness sweep saw the learner
let go of the ring, docs/operations.md "Memory"); 20 rounds, median and
worst in ms.

  BUILD=build /usr/bin/python3 scripts/budget-return.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time

build = os.environ.get("BUILD", "build")
sys.path.insert(0, os.path.join(build, "python"))
import chime  # noqa: E402

ROUNDS = 20

with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "chimed.json")
    with open(cfg, "w") as f:
        json.dump({"tables": [{"name": "u", "spec": "x:u64[]",
                               "capacity": 100, "sampler": "uniform"}]}, f)
    proc = subprocess.Popen([os.path.join(build, "src/server/chimed"),
                             "--listen", "127.0.0.1:0", "--config", cfg],
                            stdout=subprocess.PIPE, text=True)
    try:
        addr = proc.stdout.readline().split()[-1]
        with chime.Client(addr) as c:
            with c.writer("u") as w:
                w.append({"x": 1})
            ms = []
            for _ in range(ROUNDS):
                s = c.stream("u", batch_size=1, mode="shm")
                s.next(timeout=10).release()
                s.close()
                t0 = time.monotonic()
                while c.stats()["ring_bytes_total"] != 0:
                    time.sleep(0.001)
                ms.append((time.monotonic() - t0) * 1000)
        ms.sort()
        print(f"ring budget back after close: median {ms[ROUNDS // 2]:.1f} ms,"
              f" worst {ms[-1]:.1f} ms ({ROUNDS} rounds)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
