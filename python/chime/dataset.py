"""Offline datasets in and out of chime tables (docs/datasets.md).

    import chime, chime.dataset as ds
    c = chime.Client("localhost:50051")
    ds.import_file(c, "hopper-medium.hdf5", "replay",
                   mapping={"obs": "observations", "next_obs":
                            "next_observations"})
    ds.export_file(c, "replay", "replay.npz")

Import fills a table as a warm start: its writers pass the rate limiter
(Writer(warm_start=True)), priorities come from a dataset or are 1.0, a
plain table takes a transition per row and a sequence table each episode
as steps ended by end_episode, and a sharded target gets the rows spread
over its shards. The whole file is read and checked before the first
sample is sent, so a malformed or truncated file imports nothing (an error
names the dataset and row); partial=True streams it instead, in blocks,
and a bad block stops the import with the rows before it in the table.

Export reads a table's snapshot (Client.export: the items as they were at
one instant, while writers go on) into arrays named by leaf, plus
``_priority``; export_file writes them flat (HDF5 in D4RL's layout, or
.npz), and import_file reads such a file back into the same table shape.

``python3 -m chime.dataset`` is what ``chimectl import`` and ``chimectl
export`` run.
"""
import argparse
import re
import sys
import threading

import numpy as np

from . import _dsfile
from ._dsfile import Dataset, DatasetError, read  # noqa: F401

DTYPES = {
    "u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
    "u32": np.uint32, "i32": np.int32, "u64": np.uint64, "i64": np.int64,
    "f16": np.float16, "f32": np.float32, "f64": np.float64, "bool": np.bool_,
}
PRIORITY = "_priority"


def parse_spec(text):
    """[(name, numpy dtype, shape)] from a spec's text as info() gives it
    ("obs:f32[64], action:i64[]")."""
    leaves = []
    for m in re.finditer(r"([^\s,:]+):(\w+)\[([^\]]*)\]", text):
        name, dt, dims = m.groups()
        if dt not in DTYPES:
            raise ValueError(f"leaf '{name}': dtype {dt} has no numpy twin "
                             f"here (chime.dataset takes {sorted(DTYPES)})")
        if "<" in dims or "=" in dims:
            raise ValueError(f"leaf '{name}' is ragged: chime.dataset takes "
                             f"fixed leaves")
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
        leaves.append((name, np.dtype(DTYPES[dt]), shape))
    if not leaves:
        raise ValueError(f"spec '{text}': no leaves")
    return leaves


def table_info(client, table):
    """The table's info() entry; ValueError naming the tables there."""
    tables = client.info()["tables"]
    for t in tables:
        if t["name"] == table:
            return t
    raise ValueError(f"table '{table}' not found (the server has: "
                     f"{', '.join(t['name'] for t in tables) or 'none'})")


def _fit(path, src, a, dtype, shape, lo=0):
    """a as dtype and [N, *shape]: a safe cast, or one that keeps every
    value (else the first row that changes is named)."""
    want = (a.shape[0],) + tuple(shape)
    if a.shape != want:
        if a.ndim >= 1 and int(np.prod(a.shape[1:], dtype=np.int64)) == \
                int(np.prod(shape, dtype=np.int64)):
            a = a.reshape(want)
        else:
            raise DatasetError(path, src, None,
                               f"rows of shape {list(a.shape[1:])} where the "
                               f"leaf takes {list(shape)}")
    if a.dtype == dtype:
        return np.ascontiguousarray(a)
    if np.can_cast(a.dtype, dtype, "safe"):
        return np.ascontiguousarray(a.astype(dtype))
    if a.dtype.kind not in "biuf" or dtype.kind not in "biuf":
        raise DatasetError(path, src, None,
                           f"dtype {a.dtype} cannot become {dtype}")
    with np.errstate(all="ignore"):
        b = a.astype(dtype)
        back = b.astype(a.dtype)
    same = (back == a) | (np.isnan(a) & np.isnan(back)
                          if a.dtype.kind == "f" else False)
    same = same.reshape(a.shape[0], -1).all(axis=1)
    if not same.all():
        r = int(np.flatnonzero(~same)[0])
        raise DatasetError(path, src, lo + r,
                           f"a value that {dtype} cannot hold ({a.dtype})")
    return np.ascontiguousarray(b)


def _columns(ds, leaves, mapping, lo=0):
    """{leaf: array} for the table's leaves, from ds's fields by name (or
    mapping[leaf])."""
    unknown = sorted(set(mapping) - {name for name, _, _ in leaves})
    if unknown:
        raise ValueError(f"map {unknown[0]}=...: the table has no leaf "
                         f"'{unknown[0]}' (its leaves: "
                         f"{', '.join(n for n, _, _ in leaves)})")
    cols = {}
    for name, dtype, shape in leaves:
        src = mapping.get(name, name)
        a = ds.field(src)
        if a is None:
            raise DatasetError(
                ds.path, src, None,
                f"missing: leaf '{name}' reads it (the file has "
                f"{', '.join(ds.names())}; map one with {name}=NAME)")
        cols[name] = _fit(ds.path, src, a, dtype, shape, lo)
    return cols


def _priorities(ds, name, lo=0):
    """The priorities (finite, >= 0) from field name, or from _priority
    when the file has one (an export's); None: all 1.0."""
    src = name or (PRIORITY if ds.field(PRIORITY) is not None else None)
    if src is None:
        return None
    a = ds.field(src)
    if a is None:
        raise DatasetError(ds.path, src, None, "missing (the priorities)")
    p = np.asarray(a, dtype=np.float64).reshape(a.shape[0], -1)
    if p.shape[1] != 1:
        raise DatasetError(ds.path, src, None, "priorities: one per row")
    p = p[:, 0]
    bad = ~np.isfinite(p) | (p < 0)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise DatasetError(ds.path, src, lo + r,
                           f"priority {p[r]} (finite and >= 0 only)")
    return np.ascontiguousarray(p)


def _writers(client, table, n):
    """n warm-start writers: on a sharded client each binds to the shard
    with the fewest of the client's writers, so n = shards spreads them."""
    import chime
    # Samples per message up to the writer's 1 MiB: a transition is often
    # ~100 bytes, and 256 a message (the default) would make the import
    # a round trip per 25 KiB.
    return [chime.Writer(client, table, warm_start=True,
                         max_batch_samples=1 << 16) for _ in range(n)]


def _run(jobs):
    """Each job in a thread of its own (a writer's extend lets the GIL
    go); the first exception is raised once all ended."""
    errs = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 (re-raised below)
            errs.append(e)

    ts = [threading.Thread(target=wrap, args=(j,)) for j in jobs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]


def _send_plain(writers, cols, prio):
    n = next(iter(cols.values())).shape[0] if cols else 0
    k = len(writers)
    cuts = [n * i // k for i in range(k + 1)]

    def job(w, lo, hi):
        return lambda: w.extend({c: a[lo:hi] for c, a in cols.items()},
                                None if prio is None else prio[lo:hi])
    _run([job(w, cuts[i], cuts[i + 1]) for i, w in enumerate(writers)])


def _send_episodes(writers, cols, ends, first=0):
    """Episodes round-robin over the writers, each as its steps and an
    end_episode; rows [first, ends[0]) begin the first."""
    k = len(writers)
    starts = [first] + [int(e) for e in ends[:-1]]

    def job(i):
        def run():
            w = writers[i]
            for e in range(i, len(ends), k):
                lo, hi = starts[e], int(ends[e])
                if hi > lo:
                    w.extend({c: a[lo:hi] for c, a in cols.items()})
                w.end_episode()
        return run
    _run([job(i) for i in range(k)])


def _send_steps(w, cols, ends, n):
    """One piece of a streamed import into a sequence table: its rows as
    steps, an end_episode at each of ends (relative); rows after the last
    end go on into the next piece. Returns the episodes ended."""
    at = 0
    for e in ends:
        if int(e) > at:
            w.extend({c: a[at:int(e)] for c, a in cols.items()})
        w.end_episode()
        at = int(e)
    if n > at:
        w.extend({c: a[at:n] for c, a in cols.items()})
    return len(ends)


def import_dataset(client, ds, table, mapping=None, priorities=None):
    """Dataset ds into table (import_file's second half): returns
    {'rows', 'episodes', 'shards'}."""
    mapping = dict(mapping or {})
    info = table_info(client, table)
    seq = info.get("sequence")
    leaves = parse_spec(seq["step_spec"] if seq else info["spec"])
    cols = _columns(ds, leaves, mapping)
    prio = _priorities(ds, priorities)
    if seq and prio is not None and priorities:
        raise ValueError(f"table '{table}' is a sequence table: its windows "
                         f"take initial_priority, not a priority per step")
    nshards = len(client.shards())
    writers = _writers(client, table, nshards)
    try:
        if seq:
            _send_episodes(writers, cols, ds.ends)
        else:
            _send_plain(writers, cols, prio)
        _run([w.flush for w in writers])
    finally:
        for w in writers:
            w.close()
    return {"rows": ds.rows, "episodes": len(ds.ends), "shards": nshards}


def import_file(client, path, table, mapping=None, priorities=None,
                partial=False, fmt=None):
    """The file at path (HDF5: Minari's or D4RL's layout; .npz) into
    table. mapping: {leaf: dataset name} where they differ; priorities: the
    dataset holding them (default: _priority if the file has it, else
    1.0). The file is read and checked whole before anything is sent
    (DatasetError naming dataset and row; nothing imported); partial=True
    streams an HDF5 file's flat layout block by block instead (memory for
    one block; a bad block stops it, the rows before it imported, the
    error saying how many). Returns {'rows', 'episodes', 'shards'}."""
    if partial and (fmt or _dsfile.file_format(path)) == "hdf5":
        return _import_streamed(client, path, table, mapping or {}, priorities)
    return import_dataset(client, read(path, fmt), table, mapping, priorities)


def _pieces(path, leaves, mapping, priorities, out):
    """The reader of a streamed import, in a thread of its own (h5py holds
    the GIL while it reads, the writers let it go while they send, so the
    two overlap): each piece's (rows, first row, ends, columns,
    priorities) into queue out, then None, or the DatasetError."""
    try:
        for ds, lo in _dsfile.blocks(path):
            out.put((ds.rows, lo, ds.ends, _columns(ds, leaves, mapping, lo),
                     _priorities(ds, priorities, lo)))
        out.put(None)
    except DatasetError as e:
        out.put(e)


def _import_streamed(client, path, table, mapping, priorities):
    import queue
    info = table_info(client, table)
    seq = info.get("sequence")
    leaves = parse_spec(seq["step_spec"] if seq else info["spec"])
    nshards = len(client.shards())
    writers = _writers(client, table, nshards)
    done = eps = 0
    q = queue.Queue(maxsize=1)  # memory: the piece sent and the next read
    reader = threading.Thread(target=_pieces, daemon=True,
                              args=(path, leaves, mapping, priorities, q))
    reader.start()
    try:
        while True:
            piece = q.get()
            if piece is None:
                break
            if isinstance(piece, DatasetError):
                _run([w.flush for w in writers])
                raise DatasetError(piece.path, piece.dataset, piece.row,
                                   f"{piece.why} (partial: rows [0, {done}) "
                                   f"imported)") from None
            rows, lo, ends, cols, prio = piece
            if seq:
                eps += _send_steps(writers[0], cols, ends, rows)
            else:
                _send_plain(writers, cols, prio)
            done = lo + rows
        _run([w.flush for w in writers])
    finally:
        while reader.is_alive():  # a failed send: let the reader end
            try:
                q.get(timeout=0.1)
            except queue.Empty:
                pass
        for w in writers:
            w.close()
    return {"rows": done, "episodes": eps, "shards": nshards}


def export_table(client, table):
    """The table's snapshot as {leaf: array [N, *shape]} in spec order, and
    _priority (f64) and _key (u64) per item, oldest first (a sharded
    table: shard after shard). Plain tables with fixed leaves."""
    leaves = parse_spec(table_info(client, table)["spec"])
    offs, at = [], 0
    for _, dtype, shape in leaves:
        n = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        offs.append((at, n))
        at += n
    sb = at
    parts = {name: [] for name, _, _ in leaves}
    keys, prios = [], []

    def take(ch):
        if ch["count"] == 0:
            return
        raw = np.frombuffer(ch["data"], dtype=np.uint8).reshape(ch["count"], sb)
        for (name, dtype, shape), (o, n) in zip(leaves, offs):
            col = np.ascontiguousarray(raw[:, o:o + n])
            parts[name].append(col.view(dtype).reshape((ch["count"],) + shape))
        keys.append(np.frombuffer(ch["keys"], dtype="<u8"))
        prios.append(np.frombuffer(ch["priorities"], dtype="<f8"))

    client.export(table, take)
    out = {}
    for name, dtype, shape in leaves:
        out[name] = (np.concatenate(parts[name]) if parts[name]
                     else np.empty((0,) + shape, dtype=dtype))
    out[PRIORITY] = np.concatenate(prios) if prios else np.empty(0, np.float64)
    out["_key"] = np.concatenate(keys) if keys else np.empty(0, np.uint64)
    return out


def export_file(client, table, path, fmt=None):
    """The table's snapshot into a flat file (HDF5, D4RL's layout, or
    .npz): a dataset per leaf and _priority. Returns the item count."""
    arrays = export_table(client, table)
    arrays.pop("_key")
    _dsfile.write(path, arrays, fmt)
    return int(arrays[PRIORITY].shape[0])


# `chimectl import` and `chimectl export` (docs/tools.md): chimectl runs
# this module's main with its arguments (examples/chimectl_dataset.c),
# since HDF5 goes through h5py. Exit status 0, 1 for a failure (the
# message on stderr), 2 for bad usage.
CLI_USAGE = """chimectl [CONN] import FILE TABLE TARGET [--map LEAF=NAME]...
                 [--priorities NAME] [--partial] [--format hdf5|npz]
       chimectl [CONN] export TABLE FILE TARGET [--format hdf5|npz]
CONN: --token-file PATH --tls-ca PATH --tls-cert PATH --tls-key PATH
FILE: HDF5 (Minari's episode groups or D4RL's flat datasets) or .npz."""


def _parser():
    p = argparse.ArgumentParser(prog="chimectl", usage=CLI_USAGE,
                                add_help=True)
    p.add_argument("cmd", choices=["import", "export"])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("target")
    p.add_argument("--map", action="append", default=[], metavar="LEAF=NAME")
    p.add_argument("--priorities", metavar="NAME")
    p.add_argument("--partial", action="store_true")
    p.add_argument("--format", choices=["hdf5", "npz"])
    for opt in ("--token-file", "--tls-ca", "--tls-cert", "--tls-key"):
        p.add_argument(opt)
    p.add_argument("--timeout", type=float, default=60.0)
    return p


def _client(args):
    import chime
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip()
    return chime.Client(args.target, timeout=args.timeout, token=token,
                        tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                        tls_key=args.tls_key)


def _mapping(items):
    out = {}
    for m in items:
        leaf, sep, name = m.partition("=")
        if not sep or not leaf or not name:
            raise ValueError(f"--map {m}: say LEAF=NAME")
        out[leaf] = name
    return out


def main(argv=None):
    """chimectl import/export: returns the exit status."""
    try:
        args = _parser().parse_args(argv if argv is not None
                                    else sys.argv[1:])
    except SystemExit as e:
        return int(e.code or 0)
    try:
        c = _client(args)
        if args.cmd == "import":
            r = import_file(c, args.a, args.b, _mapping(args.map),
                            args.priorities, args.partial, args.format)
            print(f"imported {r['rows']} rows ({r['episodes']} episodes) "
                  f"from {args.a} into '{args.b}' over {r['shards']} "
                  f"shard(s)")
        else:
            n = export_file(c, args.a, args.b, args.format)
            print(f"exported {n} items of '{args.a}' to {args.b}")
        return 0
    except (ImportError, ValueError, OSError) as e:
        print(f"chimectl {args.cmd}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # chime's errors: say them, not a traceback
        print(f"chimectl {args.cmd}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
