#!/usr/bin/env python3
"""chimed itself in a memory cgroup (v1; root) serving a table in files
larger than the limit: the table chime-bench bigtable filled (run
scripts/bigtable.sh on DIR first), opened by chimed from its file, sampled
uniformly by a learner outside the cgroup over shm for SECONDS, then a
pread loop in the cgroup over the same file (a row at random, its bytes
whole) for as long, each from a cold cache. Prints both rates and their
ratio, every sample checked (its bytes are its insert index), a
chi-square of the draws, chimed's own memory (RssAnon) and the cgroup's
limit, peak and OOM kills. Exits 77 without a memory cgroup.

  BUILD=build LIMIT=1G GIB=4 /usr/bin/python3 scripts/bigtable_chimed.py \
      /var/tmp/chime-bigtable [SECONDS]
"""
import json
import math
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("BUILD", ROOT / "build"))
sys.path.insert(0, str(BUILD / "python"))
import chime  # noqa: E402
import numpy as np  # noqa: E402

SPEC, ITEM, BINS = "obs:u8[84,84,4]", 84 * 84 * 4, 1000


def pread_loop(path, cap, seconds):
    """The baseline, run in the cgroup: a row at random, its bytes by
    pread, for seconds; prints items/s and bad rows."""
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    rng = np.random.default_rng()
    n = bad = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for r in rng.integers(0, cap, 32):
            buf = os.pread(fd, ITEM, 4096 + int(r) * ITEM)
            bad += int.from_bytes(buf[:8], "little") != r or buf[-1] != r & 0xff
            n += 1
    print(f"{n / (time.monotonic() - t0):.0f} {bad}")
    return 0


def cg_read(cg, name):
    return (cg / name).read_text().strip()


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--pread":
        return pread_loop(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    data = pathlib.Path(sys.argv[1] if len(sys.argv) > 1
                        else "/var/tmp/chime-bigtable")
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    gib = float(os.environ.get("GIB", "4"))
    cap = int(gib * (1 << 30)) // ITEM  # as chime-bench bigtable sizes it
    cg = pathlib.Path(f"/sys/fs/cgroup/memory/chime-bigtable-chimed-{os.getpid()}")
    try:
        cg.mkdir()
    except OSError as e:
        print(f"skipped: cannot make a memory cgroup at {cg}: {e}")
        return 77
    cfg = data.parent / f"bigtable-chimed-{os.getpid()}.json"
    cfg.write_text(json.dumps({"tables": [{
        "name": "bigtable", "spec": SPEC, "capacity": cap,
        "sampler": "uniform", "remover": "fifo", "min_size": 1,
        "data_dir": str(data)}]}))
    proc = None
    try:
        (cg / "memory.limit_in_bytes").write_text(os.environ.get("LIMIT", "1G"))
        proc = subprocess.Popen(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cg),
             str(BUILD / "src/server/chimed"), "--config", str(cfg),
             "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            print(f"chimed did not start: {line!r}")
            return 1
        addr = line.split()[-1]
        bins = np.zeros(BINS, np.int64)
        n = bad = 0
        with chime.Client(addr, timeout=60) as c:
            size = c.info()["tables"][0]["size"]
            with c.stream("bigtable", batch_size=32, mode="shm") as s:
                fd = os.open(data / "bigtable.table", os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
                t0 = time.monotonic()
                while time.monotonic() - t0 < seconds:
                    b = s.next(timeout=30)
                    idx = (b.info["key"] & ((1 << 48) - 1)).astype(np.int64) - 1
                    obs = np.asarray(b["obs"]).reshape(len(idx), ITEM)
                    first = obs[:, :8].copy().view(np.uint64)[:, 0]
                    bad += int(np.sum(first != idx.astype(np.uint64)))
                    bad += int(np.sum(obs[:, -1] != (idx & 0xff)))
                    np.add.at(bins, idx * BINS // cap, 1)
                    n += len(idx)
                    del obs, first
                    b.release()
                dt = time.monotonic() - t0
        lo = (np.arange(BINS) * cap + BINS - 1) // BINS
        hi = (np.arange(1, BINS + 1) * cap + BINS - 1) // BINS
        e = n * (hi - lo) / cap
        chi2 = float(np.sum((bins - e) ** 2 / e))
        k = BINS - 1
        z = ((chi2 / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
        # The baseline in the same cgroup, from a cold cache as chimed's.
        base = subprocess.run(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cg),
             sys.executable, __file__, "--pread", str(data / "bigtable.table"),
             str(cap), str(seconds)], capture_output=True, text=True,
            check=True).stdout.split()
        prate, pbad = float(base[0]), int(base[1])
        status = pathlib.Path(f"/proc/{proc.pid}/status").read_text()
        anon = [x for x in status.splitlines() if x.startswith("RssAnon")][0]
        alive = proc.poll() is None
        oom = [x for x in cg_read(cg, "memory.oom_control").splitlines()
               if x.startswith("oom_kill ")]
        print(f"chimed in a {cg_read(cg, 'memory.limit_in_bytes')} B cgroup "
              f"opened {size} items ({size * ITEM / (1 << 30):.2f} GiB) from "
              f"{data}")
        print(f"learner (shm, batch 32): {n / dt:.0f} items/s, "
              f"{n / dt * ITEM / 1e6:.0f} MB/s over {dt:.1f} s; bad samples "
              f"{bad} of {n}")
        print(f"pread loop in the same cgroup (a row at random, whole): "
              f"{prate:.0f} items/s, bad rows {pbad}; chimed / pread "
              f"{n / dt / prate:.2f}x")
        print(f"uniform: chi2 {chi2:.1f} over {k} bins (z {z:.2f})")
        print(f"chimed: alive {alive}, {' '.join(anon.split())}; cgroup max "
              f"usage {cg_read(cg, 'memory.max_usage_in_bytes')} B, "
              f"{' '.join(oom)}")
        return 0 if (alive and bad == 0 and pbad == 0 and abs(z) < 5
                     and size == cap) else 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
        cfg.unlink(missing_ok=True)
        try:
            cg.rmdir()
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
