#!/usr/bin/env python3
"""The Python package against the C library, in the same run on the same
chimed (docs/python.md, Benchmark).

    PYTHONPATH=build/python /usr/bin/python3 python/bench.py [--runs 5]
        [--sizes 1,16] [--seconds 1.0] [--ingest-scale 1.0]
        [--cases learn,batch,ingest] [--py-learner proc|inproc|both] [--json]

Cases, each round (the figures are medians over --runs rounds, each ratio
the median of the per-round ratios, so a noisy neighbour hits a case and
its reference alike):

  learn   a shm learner reading one 8-byte word of every 64-byte line of
          every batch (all bytes come through the cache), 1 MiB and 16 MiB
          batches of 64 KiB samples from a pre-filled uniform table:
          Python (numpy: x.view(uint64)[:, ::8].sum()) against the C
          learner of chime-bench (`chime-bench service --learner`,
          bench/learn.c, --touch line), each for --seconds after a
          warm-up of one ring of batches. Both learners run alike: a
          fresh process with a client of its own that says "ready" after
          the warm-up and starts its window when told (--py-learner
          inproc runs the Python one in this process instead, on the
          client that pre-filled the table; both runs the two). Ratios:
          Python GB/s / C GB/s, and the learner process's CPU seconds per
          GB, Python / C (less sensitive to a busy machine than GB/s).
  batch   the Python per-batch overhead of next() + b["x"] + b.info +
          release() (and of next() + release() alone), timed while the
          ring already holds published batches (1 sample of 64 B per
          batch, 64 slots, drained 48 at a time), in microseconds.
  ingest  256-byte samples into a table through one writer, from the
          first call until every sample is acked: Python Writer.extend
          (chunks of 65536 samples from one numpy array) against the C
          writer of `chime-bench ingest --addr` (one chime_writer_append
          per sample). Ratios: Python samples/s / C samples/s, and the
          writer process's CPU per sample, Python / C (C's includes its
          process start-up).

chimed and chime-bench come from the build tree this package was built in
(--build overrides it). GB/s are 1e9 bytes of payload per second.
"""
import argparse
import json
import os
import pathlib
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

# This script sits beside python/chime, the package's sources without the
# extension: import chime from PYTHONPATH (the build tree) instead.
HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]
import chime  # noqa: E402

MIB = 1 << 20
SAMPLE = 64 * 1024           # bench table's sample, as bench/service.c
POOL = 64 * MIB              # its table's size, as bench/service.c
INGEST_256 = 1500000         # samples per run, as bench/ingest.c
CHUNK = 65536                # samples per extend call

CONFIG = {
    "budgets": {"stream_ring_bytes": 1 << 30, "total_ring_bytes": 4 << 30},
    "tables": [
        {"name": "bench", "spec": f"x:u8[{SAMPLE}]",
         "capacity": POOL // SAMPLE, "min_size": POOL // SAMPLE,
         "sampler": "uniform"},
        {"name": "tiny", "spec": "x:u8[64]", "capacity": 4096,
         "min_size": 1, "sampler": "uniform"},
        # as bench/ingest.c: nothing samples them (min_size = capacity)
        {"name": "ingest_256", "spec": "x:u8[256]", "capacity": 65536,
         "min_size": 65536, "sampler": "uniform"},
        {"name": "ingest_64k", "spec": "x:u8[65536]", "capacity": 512,
         "min_size": 512, "sampler": "uniform"},
    ]}


def ring_slots(batch_bytes):
    return 4 if batch_bytes >= 16 * MIB else 8  # as bench/service.c


def build_dir(arg):
    if arg:
        return pathlib.Path(arg).resolve()
    from chime import _build
    if not _build.CHIMED:
        sys.exit("bench.py: this package knows no build tree: pass --build")
    return pathlib.Path(_build.CHIMED).resolve().parents[2]


class Chimed:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="chime-pybench-")
        cfg = pathlib.Path(self.dir, "chimed.json")
        cfg.write_text(json.dumps(CONFIG))
        self.out = open(pathlib.Path(self.dir, "out"), "w+")
        self.proc = subprocess.Popen(
            [str(binary), "--listen", "127.0.0.1:0", "--config", str(cfg)],
            stdout=self.out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        self.addr = None
        while self.addr is None:
            self.out.seek(0)
            for line in self.out.read().splitlines():
                if line.startswith("listening on "):
                    self.addr = line.split()[-1]
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit("bench.py: chimed did not start")
            time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def prefill(c):
    n = POOL // SAMPLE
    x = np.zeros((n, SAMPLE), np.uint8)
    x[:, :8] = np.arange(n, dtype=np.uint64)[:, None].view(np.uint8)
    with c.writer("bench") as w:
        w.extend({"x": x})
    with c.writer("tiny") as w:
        w.extend({"x": np.zeros((4096, 64), np.uint8)})


# ------------------------------------------------------------------ learn

def c_learn(bench, addr, batch, slots, seconds):
    """GB/s of chime-bench's C learner (bench/learn.c) in its own process:
    it warms up, says "ready", and starts its window on SIGUSR1."""
    p = subprocess.Popen(
        [str(bench), "service", "--learner", addr, "bench", "shm",
         str(batch), str(slots), str(slots), str(seconds), "line"],
        stdout=subprocess.PIPE, text=True)
    return drive_learner(p, seconds, lambda: p.send_signal(signal.SIGUSR1),
                         "C")


def drive_learner(p, seconds, go, who):
    """Waits for a learner process's "ready", starts its window with go(),
    and returns (GB/s, CPU s/GB) from its "result" line."""
    try:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"{who} learner said {line!r}")
        go()
        line = p.stdout.readline().split()
        if p.wait(seconds + 60) != 0 or line[:1] != ["result"]:
            raise RuntimeError(f"{who} learner failed: {line}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    nbytes, t0, t1 = int(line[1]), float(line[3]), float(line[4])
    return nbytes / (t1 - t0) / 1e9, float(line[5]) / (nbytes / 1e9)


def py_learn_loop(c, batch, slots, seconds, at_start=None):
    """The C learner's loop in Python: next, one word of every 64-byte line
    with numpy, release; (bytes, t0, t1, CPU s) of the timed window."""
    sink = 0
    with c.stream("bench", batch_size=batch, slots=slots, mode="shm") as s:
        if s.mode != "shm":
            raise RuntimeError(f"got mode {s.mode}: {s.fallback_reason}")
        for _ in range(slots):  # the warm-up, as the C learner's
            b = s.next(timeout=30)
            sink += int(b["x"].view(np.uint64)[:, ::8].sum())
            b.release()
        if at_start:
            at_start()
        nbytes = 0
        cpu0 = time.process_time()
        t0 = time.monotonic()
        deadline = t0 + seconds
        while time.monotonic() < deadline:
            b = s.next(timeout=30)
            x = b["x"]
            sink += int(x.view(np.uint64)[:, ::8].sum())
            nbytes += x.nbytes
            del x
            b.release()
        t1 = time.monotonic()
        cpu1 = time.process_time()
    return nbytes, t0, t1, cpu1 - cpu0


def py_learn(c, batch, slots, seconds):
    """GB/s and CPU s/GB of py_learn_loop in this process."""
    nbytes, t0, t1, cpu = py_learn_loop(c, batch, slots, seconds)
    return nbytes / (t1 - t0) / 1e9, cpu / (nbytes / 1e9)


def py_learner_child(addr, batch, slots, seconds):
    """--learner-child: py_learn_loop in a process of its own with a client
    of its own, driven as the C learner is (says "ready" after the warm-up,
    starts on a line on stdin, prints "result BYTES 0 T0 T1 CPU")."""
    with chime.Client(addr) as c:
        nbytes, t0, t1, cpu = py_learn_loop(
            c, batch, slots, seconds,
            at_start=lambda: (print("ready", flush=True),
                              sys.stdin.readline()))
    print(f"result {nbytes} 0 {t0:.9f} {t1:.9f} {cpu:.6f}", flush=True)
    return 0


def py_learn_proc(addr, batch, slots, seconds):
    """GB/s and CPU s/GB of py_learner_child: the same process set-up as
    the C learner's (a fresh process and client, nothing else in it)."""
    p = subprocess.Popen(
        [sys.executable, str(pathlib.Path(__file__).resolve()),
         "--learner-child", addr, str(batch), str(slots), str(seconds)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in sys.path if p)))
    return drive_learner(p, seconds, lambda: (p.stdin.write("go\n"),
                                              p.stdin.flush()), "Python")


# ------------------------------------------------------------------ batch

def py_batch_overhead(c, rounds=20, per_round=48, slots=64):
    """(us for next + views + release, us for next + release), medians over
    rounds of draining a ring that holds published batches."""
    full, bare = [], []
    with c.stream("tiny", batch_size=1, slots=slots, mode="shm") as s:
        for _ in range(2 * slots):
            s.next(timeout=30).release()
        for r in range(2 * rounds):
            time.sleep(0.05)  # the server fills every free slot
            views = r % 2 == 0
            t0 = time.perf_counter()
            for _ in range(per_round):
                b = s.next(timeout=30)
                if views:
                    x = b["x"]
                    info = b.info
                    del x, info
                b.release()
            dt = (time.perf_counter() - t0) / per_round * 1e6
            (full if views else bare).append(dt)
    return statistics.median(full), statistics.median(bare)


# ----------------------------------------------------------------- ingest

def c_ingest(bench, addr, scale):
    """(samples/s, CPU us per sample of the writer's process, start-up
    included)."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [str(bench), "ingest", "--addr", addr, "--only", "256", "--runs",
         "1", "--scale", str(scale), "--json"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = json.loads(out.strip().splitlines()[-1])
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return r["samples_per_s"], cpu / r["samples"] * 1e6


def py_ingest(c, scale):
    n = max(CHUNK, int(INGEST_256 * scale) // CHUNK * CHUNK)
    x = np.zeros((CHUNK, 256), np.uint8)
    with c.writer("ingest_256") as w:
        cpu0 = time.process_time()
        t0 = time.monotonic()
        for k in range(n // CHUNK):
            x[:, :8] = (np.arange(CHUNK, dtype=np.uint64) +
                        np.uint64(k * CHUNK))[:, None].view(np.uint8)
            w.extend({"x": x})
        w.flush()
        dt = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        if w.acked != n:
            raise RuntimeError(f"acked {w.acked} of {n}")
    return n / dt, cpu / n * 1e6


# ----------------------------------------------------------------- driver

def summary(v):
    return statistics.median(v), min(v), max(v)


def main():
    ap = argparse.ArgumentParser(
        description="Python learner and actor against the C ones")
    ap.add_argument("--build", help="build tree (default: this package's)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="1,16", help="batch MiB")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="timed window per learner case and round")
    ap.add_argument("--ingest-scale", type=float, default=1.0,
                    help="x 1.5M samples per ingest run")
    ap.add_argument("--cases", default="learn,batch,ingest",
                    help="which of learn, batch, ingest to run")
    ap.add_argument("--py-learner", choices=("proc", "inproc", "both"),
                    default="proc",
                    help="the Python learner in a process of its own, as "
                    "the C one (proc), in this one (inproc), or both")
    ap.add_argument("--json", action="store_true")
    if sys.argv[1:2] == ["--learner-child"]:
        addr, batch, slots, seconds = sys.argv[2:6]
        return py_learner_child(addr, int(batch), int(slots), float(seconds))
    a = ap.parse_args()
    cases = set(a.cases.split(","))
    if not cases or cases - {"learn", "batch", "ingest"}:
        ap.error("--cases: a list of learn, batch, ingest")
    build = build_dir(a.build)
    bench = build / "bench" / "chime-bench"
    sizes = [int(s) for s in a.sizes.split(",")]
    res = {f"learn_{m}_{s}": [] for m in ("c", "py") for s in sizes}
    res.update({f"{k}_{s}": [] for s in sizes
                for k in ("learn_ratio", "cpu_c", "cpu_py", "cpu_ratio",
                          "learn_pyin", "learn_ratio_in", "cpu_ratio_in")})
    res.update(batch_us=[], batch_bare_us=[], ingest_c=[], ingest_py=[],
               ingest_ratio=[], ingest_cpu_c=[], ingest_cpu_py=[],
               ingest_cpu_ratio=[])
    a.sizes_run = sizes if "learn" in cases else []
    a.cases_run = cases
    srv = Chimed(build / "src" / "server" / "chimed")
    try:
        with chime.Client(srv.addr) as c:
            prefill(c)
            for r in range(a.runs):
                for s in a.sizes_run:
                    batch = s * MIB // SAMPLE
                    slots = ring_slots(s * MIB)
                    runs = {"c": lambda: c_learn(bench, srv.addr, batch,
                                                 slots, a.seconds)}
                    if a.py_learner != "inproc":
                        runs["py"] = lambda: py_learn_proc(
                            srv.addr, batch, slots, a.seconds)
                    if a.py_learner != "proc":
                        runs["pyin"] = lambda: py_learn(c, batch, slots,
                                                        a.seconds)
                    # rotate which goes first: none always meets another's
                    # leftovers (caches, a busy neighbour)
                    order = list(runs)
                    order = order[r % len(order):] + order[:r % len(order)]
                    got = {k: runs[k]() for k in order}
                    if "py" not in got:
                        got["py"] = got["pyin"]
                    (cg, cc), (pg, pc) = got["c"], got["py"]
                    res[f"learn_c_{s}"].append(cg)
                    res[f"learn_py_{s}"].append(pg)
                    res[f"learn_ratio_{s}"].append(pg / cg)
                    res[f"cpu_c_{s}"].append(cc)
                    res[f"cpu_py_{s}"].append(pc)
                    res[f"cpu_ratio_{s}"].append(pc / cc)
                    if a.py_learner == "both":
                        ig, ic = got["pyin"]
                        res[f"learn_pyin_{s}"].append(ig)
                        res[f"learn_ratio_in_{s}"].append(ig / cg)
                        res[f"cpu_ratio_in_{s}"].append(ic / cc)
                if "batch" in cases:
                    full, bare = py_batch_overhead(c)
                    res["batch_us"].append(full)
                    res["batch_bare_us"].append(bare)
                if "ingest" not in cases:
                    pass
                elif r % 2:
                    pi, pic = py_ingest(c, a.ingest_scale)
                    ci, cic = c_ingest(bench, srv.addr, a.ingest_scale)
                else:
                    ci, cic = c_ingest(bench, srv.addr, a.ingest_scale)
                    pi, pic = py_ingest(c, a.ingest_scale)
                if "ingest" in cases:
                    res["ingest_cpu_c"].append(cic)
                    res["ingest_cpu_py"].append(pic)
                    res["ingest_cpu_ratio"].append(pic / cic)
                    res["ingest_c"].append(ci)
                    res["ingest_py"].append(pi)
                    res["ingest_ratio"].append(pi / ci)
                print(f"round {r + 1}/{a.runs} done", file=sys.stderr,
                      flush=True)
    finally:
        srv.stop()
    emit(a, res)
    return 0


def emit(a, res):
    med = {k: summary(v) for k, v in res.items() if v}
    rows = []
    for s in a.sizes_run:
        row = {
            "bench": "python", "case": "learn", "batch_mib": s,
            "touch": "line", "py_learner": a.py_learner,
            "c_gbps": round(med[f"learn_c_{s}"][0], 3),
            "py_gbps": round(med[f"learn_py_{s}"][0], 3),
            "ratio": round(med[f"learn_ratio_{s}"][0], 3),
            "ratio_min": round(med[f"learn_ratio_{s}"][1], 3),
            "ratio_max": round(med[f"learn_ratio_{s}"][2], 3),
            "c_cpu_s_per_gb": round(med[f"cpu_c_{s}"][0], 4),
            "py_cpu_s_per_gb": round(med[f"cpu_py_{s}"][0], 4),
            "cpu_ratio": round(med[f"cpu_ratio_{s}"][0], 3),
            "runs": a.runs}
        if a.py_learner == "both":
            row.update(
                inproc_gbps=round(med[f"learn_pyin_{s}"][0], 3),
                inproc_ratio=round(med[f"learn_ratio_in_{s}"][0], 3),
                inproc_ratio_min=round(med[f"learn_ratio_in_{s}"][1], 3),
                inproc_ratio_max=round(med[f"learn_ratio_in_{s}"][2], 3),
                inproc_cpu_ratio=round(med[f"cpu_ratio_in_{s}"][0], 3))
        rows.append(row)
    if "batch" in a.cases_run:
        rows.append({
            "bench": "python", "case": "batch",
            "next_views_release_us": round(med["batch_us"][0], 2),
            "next_views_release_us_max": round(med["batch_us"][2], 2),
            "next_release_us": round(med["batch_bare_us"][0], 2),
            "runs": a.runs})
    if "ingest" in a.cases_run:
        rows.append({
            "bench": "python", "case": "ingest", "sample_bytes": 256,
            "c_samples_per_s": round(med["ingest_c"][0]),
            "py_samples_per_s": round(med["ingest_py"][0]),
            "ratio": round(med["ingest_ratio"][0], 3),
            "ratio_min": round(med["ingest_ratio"][1], 3),
            "ratio_max": round(med["ingest_ratio"][2], 3),
            "c_cpu_us_per_sample": round(med["ingest_cpu_c"][0], 3),
            "py_cpu_us_per_sample": round(med["ingest_cpu_py"][0], 3),
            "cpu_ratio": round(med["ingest_cpu_ratio"][0], 3),
            "runs": a.runs})
    if a.json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"medians of {a.runs} rounds [min..max]; Python learner: "
          f"{a.py_learner}")
    for s in a.sizes_run:
        c, p, r = (med[f"learn_c_{s}"], med[f"learn_py_{s}"],
                   med[f"learn_ratio_{s}"])
        print(f"learn {s:3d} MiB, every line: C {c[0]:6.2f} GB/s, Python "
              f"{p[0]:6.2f} GB/s, Python/C {r[0]:.3f} [{r[1]:.3f}..{r[2]:.3f}]")
        cc, pc, cr = (med[f"cpu_c_{s}"], med[f"cpu_py_{s}"],
                      med[f"cpu_ratio_{s}"])
        print(f"      learner CPU s/GB: C {cc[0]:.4f}, Python {pc[0]:.4f}, "
              f"Python/C {cr[0]:.3f} [{cr[1]:.3f}..{cr[2]:.3f}]")
        if a.py_learner == "both":
            ig, ir, ic = (med[f"learn_pyin_{s}"], med[f"learn_ratio_in_{s}"],
                          med[f"cpu_ratio_in_{s}"])
            print(f"      Python in the bench's own process: {ig[0]:6.2f} "
                  f"GB/s, Python/C {ir[0]:.3f} [{ir[1]:.3f}..{ir[2]:.3f}], "
                  f"CPU Python/C {ic[0]:.3f}")
    if "batch" in a.cases_run:
        b, bb = med["batch_us"], med["batch_bare_us"]
        print(f"batch: next + views + release {b[0]:.2f} us "
              f"[{b[1]:.2f}..{b[2]:.2f}], next + release {bb[0]:.2f} us")
    if "ingest" in a.cases_run:
        ci, pi, ir = med["ingest_c"], med["ingest_py"], med["ingest_ratio"]
        print(f"ingest 256 B: C {ci[0]:,.0f} samples/s, Python extend "
              f"{pi[0]:,.0f} samples/s, Python/C {ir[0]:.3f} "
              f"[{ir[1]:.3f}..{ir[2]:.3f}]")
        cc, pc, cr = (med["ingest_cpu_c"], med["ingest_cpu_py"],
                      med["ingest_cpu_ratio"])
        print(f"      writer CPU us/sample: C {cc[0]:.3f}, Python "
              f"{pc[0]:.3f}, Python/C {cr[0]:.3f} [{cr[1]:.3f}..{cr[2]:.3f}]")


if __name__ == "__main__":
    sys.exit(main())
