#!/usr/bin/env python3
"""Import of an offline dataset against h5py reading the same file, in the
same run (docs/datasets.md, issue 34's target: >= 0.8x).

    PYTHONPATH=build/python /usr/bin/python3 bench/dataset_import.py
        [--rows 1000000] [--runs 3] [--gzip] [--json] [--back-to-back N]
        [--floors]

The file: D4RL's flat layout, --rows transitions of a Hopper-sized task
(observations and next_observations f32[11], actions f32[3], rewards f32,
terminals and timeouts bool: 106 bytes a transition), written once to a
temporary directory (contiguous datasets; --gzip: chunks of 16384 rows
compressed at gzip level 4, as large published files often are). Each
round, with the file in the page cache:

  h5py     every dataset read whole with h5py (f[name][()]): the rate at
           which h5py alone reads the file
  import   chime.dataset.import_file into a plain table (capacity --rows,
           uniform sampler, a fifo remover, so each round replaces the
           last): the file read and checked whole, then sent by a
           warm-start writer, until every sample is acked
  partial  the same with partial=True: read in blocks of 262144 rows,
           each sent as soon as it is read (bounded memory)

--floors instead times, in one run, what an import cannot do without:
h5py's read, a memcpy of the file's bytes, and packing its columns into
rows (a numpy structured array, field by field: what a writer of rows
does before a byte is sent), medians of 7, each also as a fraction of
the read's time.

--back-to-back N instead times N default imports one after another (after
one unmeasured), nothing between them: the wall and the CPU seconds here
and in chimed per 10^6 transitions, which a busy machine moves less than
a round's rate.

Figures are transitions per second, medians over --runs rounds; the
ratios are import / h5py, each the median of the per-round ratios. Beside
them, CPU seconds per 10^6 transitions (medians), which a busy machine
moves less than rates: h5py's read, and the default import's in this
process (reading, checking, the writer) and in chimed (the inserts). chimed
is the one of this package's build tree ($CHIMED overrides), started with
chime.ensure_server on a Unix socket.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]
import chime  # noqa: E402
import chime.dataset as ds  # noqa: E402

SPEC = ("observations:f32[11], actions:f32[3], rewards:f32[], "
        "next_observations:f32[11], terminals:bool[], timeouts:bool[]")


def make_file(path, rows, gzip):
    import h5py
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((rows + 1, 11), dtype=np.float32)
    done = rng.random(rows) < 1e-3
    data = {"observations": obs[:rows], "actions":
            rng.standard_normal((rows, 3), dtype=np.float32),
            "rewards": rng.standard_normal(rows, dtype=np.float32),
            "next_observations": obs[1:], "terminals": done,
            "timeouts": np.zeros(rows, dtype=bool)}
    kw = {"chunks": True, "compression": "gzip", "compression_opts": 4} \
        if gzip else {}
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            if gzip:
                kw["chunks"] = (16384,) + v.shape[1:]
            f.create_dataset(k, data=v, **kw)


def h5py_read(path):
    import h5py
    t0 = time.perf_counter()
    with h5py.File(path, "r") as f:
        arrays = [f[k][()] for k in f.keys()]
    dt = time.perf_counter() - t0
    assert all(a.shape[0] > 0 for a in arrays)
    return dt


def timed_import(client, path, partial):
    t0 = time.perf_counter()
    r = ds.import_file(client, path, "t", partial=partial)
    return time.perf_counter() - t0, r["rows"]


def cpu_of(pid):
    """A process's user + system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def back_to_back(client, path, pid, a):
    timed_import(client, path, False)  # the page cache, chimed's pages
    c0, s0, t0 = time.process_time(), cpu_of(pid), time.perf_counter()
    for _ in range(a.back_to_back):
        timed_import(client, path, False)
    m = 1e6 / (a.rows * a.back_to_back)
    wall, here = time.perf_counter() - t0, time.process_time() - c0
    chimed = cpu_of(pid) - s0
    client.close()
    os.remove(path)
    print(f"{a.back_to_back} imports of {a.rows} transitions back to back: "
          f"wall {wall:.2f} s; per 10^6: wall {wall * m:.3f} s, CPU "
          f"{here * m:.3f} s here + {chimed * m:.3f} s chimed")


def floors(path, rows):
    import h5py

    def read():
        with h5py.File(path, "r") as f:
            return {k: f[k][()] for k in f.keys()}
    cols = read()
    names = list(cols)
    dt = np.dtype([(n, cols[n].dtype, cols[n].shape[1:]) for n in names])
    flat = np.concatenate([cols[n].reshape(rows, -1).view(np.uint8)
                           for n in names], axis=1)
    dst = np.empty_like(flat)

    def pack():
        rec = np.empty(rows, dtype=dt)
        for n in names:
            rec[n] = cols[n]
    cases = [("h5py read", read), (f"memcpy {flat.nbytes >> 20} MiB",
                                    lambda: np.copyto(dst, flat)),
             ("pack columns into rows", pack)]
    med = {}
    for name, fn in cases:
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        med[name] = statistics.median(ts)
    for name, t in med.items():
        print(f"{name:24s} {t * 1e3:8.1f} ms {rows / t / 1e6:7.2f} M rows/s "
              f"{t / med['h5py read']:5.2f}x the read's time")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--back-to-back", type=int, default=0, metavar="N")
    ap.add_argument("--floors", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="chime-dsbench-")
    path = os.path.join(tmp, "d.hdf5")
    make_file(path, a.rows, a.gzip)
    if a.floors:
        floors(path, a.rows)
        os.remove(path)
        return
    config = {"tables": [{"name": "t", "spec": SPEC, "capacity": a.rows,
                          "sampler": "uniform", "remover": "fifo"}]}
    client = chime.ensure_server("dsbench", config, mode="spawn",
                                 run_dir=tmp, timeout=60)
    pid = chime.server_state("dsbench", run_dir=tmp)["chimed_pid"]
    if a.back_to_back > 0:
        back_to_back(client, path, pid, a)
        return
    rounds, cpu = [], []
    h5py_read(path)  # into the page cache
    for _ in range(a.runs):
        c0 = time.process_time()
        th = h5py_read(path)
        c1, s1 = time.process_time(), cpu_of(pid)
        ti, n1 = timed_import(client, path, False)
        c2, s2 = time.process_time(), cpu_of(pid)
        tp, n2 = timed_import(client, path, True)
        assert n1 == n2 == a.rows
        rounds.append((a.rows / th, a.rows / ti, a.rows / tp))
        m = 1e6 / a.rows
        cpu.append(((c1 - c0) * m, (c2 - c1) * m, (s2 - s1) * m))
    med = [statistics.median(r[i] for r in rounds) for i in range(3)]
    mc = [statistics.median(r[i] for r in cpu) for i in range(3)]
    out = {"rows": a.rows, "bytes_per_row": 106, "gzip": a.gzip,
           "runs": a.runs, "h5py_rows_per_s": med[0],
           "import_rows_per_s": med[1], "partial_rows_per_s": med[2],
           "import_ratio": statistics.median(r[1] / r[0] for r in rounds),
           "partial_ratio": statistics.median(r[2] / r[0] for r in rounds),
           "cpu_s_per_M": {"h5py": mc[0], "import_client": mc[1],
                           "import_chimed": mc[2]}}
    client.close()
    os.remove(path)
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.rows} transitions ({'gzip' if a.gzip else 'raw'}), "
              f"median of {a.runs}: h5py {med[0] / 1e6:.2f} M/s, import "
              f"{med[1] / 1e6:.2f} M/s ({out['import_ratio']:.2f}x), "
              f"partial {med[2] / 1e6:.2f} M/s "
              f"({out['partial_ratio']:.2f}x); CPU s per 10^6: h5py "
              f"{mc[0]:.3f}, import {mc[1]:.3f} here + {mc[2]:.3f} chimed")


if __name__ == "__main__":
    main()
