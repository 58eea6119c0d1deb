"""Offline RL dataset files as flat numpy arrays (chime.dataset's formats).

Three layouts are read, one written (docs/datasets.md):

- HDF5, Minari's: a group per episode (``episode_0``, ``episode_1``, ...)
  holding ``observations`` (one row more than the steps: the first and the
  last observation), ``actions``, ``rewards``, ``terminations`` and
  ``truncations`` (one row per step), and more datasets or groups (a dict
  space: ``observations/pixels``). Read as fields ``observations`` (each
  step's first observation), ``next_observations`` (its last) and the
  others by name, episodes back to back.
- HDF5, D4RL's flat one: datasets at the root, one row per transition
  (``observations``, ``actions``, ``rewards``, ``terminals``, ``timeouts``,
  ``next_observations``, ...); an episode ends where ``terminals`` or
  ``timeouts`` is set. Also what chime.dataset exports.
- ``.npz``: arrays keyed by name, one row per transition.

Names may be nested (``infos/goal``). ``terminals`` and ``terminations``,
``timeouts`` and ``truncations`` name the same field in every layout.

Every error names the file, the dataset and (where rows are at fault) the
row, and is raised before anything is returned: a caller that has a
Dataset has all of it.
"""
import os
import re
import zipfile

import numpy as np

ALIASES = {
    "terminals": "terminations",
    "terminations": "terminals",
    "timeouts": "truncations",
    "truncations": "timeouts",
}
# Rows read per h5py call: a failed read is searched for its first bad
# row within one block.
BLOCK_ROWS = 1 << 16


class DatasetError(ValueError):
    """A file chime.dataset cannot use: .path, .dataset (None: the file as
    a whole) and .row (None: no row at fault) say where."""

    def __init__(self, path, dataset, row, why):
        where = f"{path}"
        if dataset is not None:
            where += f": dataset '{dataset}'"
        if row is not None:
            where += f", row {row}"
        super().__init__(f"{where}: {why}")
        self.path, self.dataset, self.row, self.why = path, dataset, row, why


class Dataset:
    """A file's fields as arrays of one row per transition (fields: name ->
    array [N, ...]) and where its episodes end (ends: ascending row
    indices, exclusive; the last is N)."""

    def __init__(self, path, fields, ends, layout, rows=None):
        self.path, self.fields, self.ends, self.layout = path, fields, ends, layout
        if rows is None:
            rows = int(ends[-1]) if len(ends) else 0
        self.rows = rows

    def field(self, name):
        """The array called name (or its alias), else None."""
        if name in self.fields:
            return self.fields[name]
        return self.fields.get(ALIASES.get(name, ""))

    def names(self):
        return sorted(self.fields)


def _read_h5(path, ds, name, first=0, end=None):
    """Rows [first, end) of h5py dataset ds (all by default), block by
    block: a block that fails to read is searched row by row for the first
    that does, so the error names it."""
    if ds.shape == ():
        raise DatasetError(path, name, None, "a scalar, not one row per step")
    n = ds.shape[0] if end is None else min(end, ds.shape[0])
    out = np.empty((n - first,) + ds.shape[1:], dtype=ds.dtype)
    try:  # one read, as h5py alone would; blocks only to find a bad row
        if n > first:
            ds.read_direct(out, np.s_[first:n], np.s_[0:n - first])
        return out
    except (OSError, ValueError, RuntimeError):
        pass
    for lo in range(first, n, BLOCK_ROWS):
        hi = min(n, lo + BLOCK_ROWS)
        try:
            ds.read_direct(out, np.s_[lo:hi], np.s_[lo - first:hi - first])
        except (OSError, ValueError, RuntimeError) as e:
            for r in range(lo, hi):
                try:
                    ds[r]
                except (OSError, ValueError, RuntimeError):
                    raise DatasetError(path, name, r,
                                       f"cannot be read ({e})") from None
            raise DatasetError(path, name, lo, f"cannot be read ({e})") from None
    return out


def _h5_datasets(h5py, group, prefix=""):
    """(name, dataset) of every dataset under group, nested names joined
    with '/', in name order."""
    out = []
    for k in sorted(group.keys()):
        obj = group.get(k, getlink=False)
        name = prefix + k
        if isinstance(obj, h5py.Group):
            out += _h5_datasets(h5py, obj, name + "/")
        elif isinstance(obj, h5py.Dataset):
            out.append((name, obj))
    return out


def _import_h5py():
    try:
        import h5py
    except ImportError:
        raise ImportError(
            "chime.dataset: HDF5 files need h5py (Debian: apt-get install "
            "python3-h5py; scripts/setup installs it)") from None
    return h5py


def _ends_from_flags(n, term, trunc):
    """Episode ends (exclusive) where either flag is set, and n."""
    flag = np.zeros(n, dtype=bool)
    for f in (term, trunc):
        if f is not None:
            flag |= np.asarray(f).reshape(n, -1).any(axis=1)
    ends = list(np.flatnonzero(flag) + 1)
    if not ends or ends[-1] != n:
        ends.append(n)
    return np.asarray(ends, dtype=np.int64)


def _check_rows(path, fields, n, why):
    for name, a in fields.items():
        if a.ndim == 0 or a.shape[0] != n:
            got = a.shape[0] if a.ndim else 0
            raise DatasetError(path, name, min(got, n),
                               f"{got} rows where {why} has {n}")


def _minari_episode(path, h5py, g, ename):
    """One episode group's fields, checked: steps = actions' rows."""
    items = [(n, d) for n, d in _h5_datasets(h5py, g)
             if not n.startswith("infos/") and n != "infos"]
    if not any(n == "actions" for n, _ in items):
        raise DatasetError(path, f"{ename}/actions", None,
                           "missing (a Minari episode has actions)")
    raw = {n: _read_h5(path, d, f"{ename}/{n}") for n, d in items}
    steps = raw["actions"].shape[0]
    fields = {}
    for n, a in raw.items():
        if n == "observations" or n.startswith("observations/"):
            if a.shape[0] != steps + 1:
                raise DatasetError(
                    path, f"{ename}/{n}", min(a.shape[0], steps + 1),
                    f"{a.shape[0]} rows where a Minari episode of {steps} "
                    f"steps has {steps + 1} (first and last observation)")
            fields[n] = a[:steps]
            fields["next_" + n] = a[1:]
        else:
            fields[n] = a
    _check_rows(path, {f"{ename}/{k}": v for k, v in fields.items()}, steps,
                f"{ename}/actions")
    return fields, steps


def read_minari(path, f, h5py):
    names = [k for k in f.keys() if re.fullmatch(r"episode_\d+", k)]
    names.sort(key=lambda k: int(k.split("_")[1]))
    parts, ends, total = [], [], 0
    for ename in names:
        fields, steps = _minari_episode(path, h5py, f[ename], ename)
        if parts and set(fields) != set(parts[0]):
            missing = sorted(set(parts[0]) ^ set(fields))[0]
            raise DatasetError(path, f"{ename}/{missing}", None,
                               f"in some episodes only ({names[0]} "
                               f"differs)")
        parts.append(fields)
        total += steps
        ends.append(total)
    if not parts:
        raise DatasetError(path, None, None, "no episode_N group")
    fields = {}
    for k in parts[0]:
        try:
            fields[k] = np.concatenate([p[k] for p in parts])
        except ValueError as e:
            raise DatasetError(path, k, None,
                               f"episodes disagree on its shape ({e})") from None
    return Dataset(path, fields, np.asarray(ends, dtype=np.int64), "minari")


def _rows_of_most(arrays):
    """The row count most datasets have (ties: the larger): one that
    differs is the one at fault, and its error names where it ends."""
    counts = {}
    for a in arrays.values():
        n = a.shape[0] if a.ndim else 0
        counts[n] = counts.get(n, 0) + 1
    return max(counts, key=lambda n: (counts[n], n))


def read_flat(path, arrays, layout):
    """Flat arrays (D4RL's HDF5, .npz): one row per transition."""
    if not arrays:
        raise DatasetError(path, None, None, "no datasets")
    n = _rows_of_most(arrays)
    _check_rows(path, arrays, n, "the others")
    term = arrays.get("terminals", arrays.get("terminations"))
    trunc = arrays.get("timeouts", arrays.get("truncations"))
    return Dataset(path, arrays, _ends_from_flags(n, term, trunc), layout)


def _open_h5(path):
    h5py = _import_h5py()
    try:
        return h5py, h5py.File(path, "r")
    except OSError as e:
        raise DatasetError(path, None, None,
                           f"not a readable HDF5 file (truncated?): {e}") from None


def _flat_sets(h5py, f):
    return [(n, d) for n, d in _h5_datasets(h5py, f)
            if not n.startswith("infos/") and not n.startswith("metadata/")]


def blocks(path, rows=None):
    """An HDF5 file as (Dataset, first row) pieces, for a streamed
    (partial) import: a Minari file episode by episode, a flat one rows
    at a time. A piece's ends are the episodes that end in it, relative
    to its first row (none: the episode goes on in the next piece)."""
    rows = rows or 4 * BLOCK_ROWS
    h5py, f = _open_h5(path)
    with f:
        names = [k for k in f.keys() if re.fullmatch(r"episode_\d+", k)]
        names.sort(key=lambda k: int(k.split("_")[1]))
        lo = 0
        for ename in names:
            fields, steps = _minari_episode(path, h5py, f[ename], ename)
            yield Dataset(path, fields, np.asarray([steps]), "minari"), lo
            lo += steps
        if names:
            return
        sets = _flat_sets(h5py, f)
        if not sets:
            raise DatasetError(path, None, None, "no datasets")
        shapes = {n: np.empty((d.shape[0] if d.shape else 0, 0)) for n, d in sets}
        n = _rows_of_most(shapes)
        _check_rows(path, shapes, n, "the others")
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            arrays = {k: _read_h5(path, d, k, lo, hi) for k, d in sets}
            term = arrays.get("terminals", arrays.get("terminations"))
            trunc = arrays.get("timeouts", arrays.get("truncations"))
            ends = _ends_from_flags(hi - lo, term, trunc)
            if ends[-1] == hi - lo and hi < n and not _flag_at(term, trunc, -1):
                ends = ends[:-1]
            yield Dataset(path, arrays, ends, "d4rl", rows=hi - lo), lo


def _flag_at(term, trunc, i):
    return any(f is not None and bool(np.asarray(f[i]).any())
               for f in (term, trunc))


def read_hdf5(path):
    h5py, f = _open_h5(path)
    with f:
        if any(re.fullmatch(r"episode_\d+", k) for k in f.keys()):
            return read_minari(path, f, h5py)
        arrays = {n: _read_h5(path, d, n) for n, d in _flat_sets(h5py, f)}
        return read_flat(path, arrays, "d4rl")


def _npz_member(path, z, info):
    """One .npy member of an npz, read from its header: a member that
    ends early names the first row it lacks."""
    name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
    try:
        with z.open(info) as fp:
            major, minor = np.lib.format.read_magic(fp)
            if (major, minor) == (1, 0):
                shape, order, dtype = np.lib.format.read_array_header_1_0(fp)
            else:
                shape, order, dtype = np.lib.format.read_array_header_2_0(fp)
            if dtype.hasobject:
                raise DatasetError(path, name, None,
                                   "holds Python objects (not numbers)")
            n = shape[0] if shape else 0
            row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
            data = bytearray()
            try:
                while True:
                    b = fp.read(1 << 22)
                    if not b:
                        break
                    data += b
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
                got = len(data) // row if row else 0
                raise DatasetError(path, name, got,
                                   f"cannot be read past it ({e})") from None
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise DatasetError(path, name, None, f"cannot be read ({e})") from None
    if len(data) < n * row:
        raise DatasetError(path, name, len(data) // row if row else 0,
                           f"ends early: {len(data)} of {n * row} bytes")
    a = np.frombuffer(bytes(data[:n * row]), dtype=dtype)
    a = a.reshape(shape, order="F" if order else "C")
    return name, np.ascontiguousarray(a)


def read_npz(path):
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise DatasetError(path, None, None,
                           f"not a readable .npz (truncated?): {e}") from None
    with z:
        arrays = dict(_npz_member(path, z, i) for i in z.infolist())
    return read_flat(path, arrays, "npz")


def read(path, fmt=None):
    """The Dataset in path; fmt 'hdf5' or 'npz' (None: by extension)."""
    fmt = fmt or file_format(path)
    if not os.path.exists(path):
        raise DatasetError(path, None, None, "no such file")
    return read_hdf5(path) if fmt == "hdf5" else read_npz(path)


def file_format(path):
    ext = os.path.splitext(path)[1].lower()
    if ext in (".h5", ".hdf5", ".hdf"):
        return "hdf5"
    if ext == ".npz":
        return "npz"
    raise ValueError(f"{path}: say the format (.h5/.hdf5 or .npz, or "
                     f"format='hdf5'|'npz')")


def write(path, arrays, fmt=None):
    """arrays (name -> array, in order) as a flat file: HDF5 (D4RL's
    layout, one dataset per name) or .npz. The bytes depend on the arrays
    alone (no time stamps), so the same table exported twice is the same
    file."""
    fmt = fmt or file_format(path)
    tmp = path + ".part"
    if fmt == "hdf5":
        h5py = _import_h5py()
        with h5py.File(tmp, "w", track_order=True) as f:
            for k, a in arrays.items():
                f.create_dataset(k, data=a, track_times=False)
    else:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED,
                             allowZip64=True) as z:
            for k, a in arrays.items():
                zi = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
                with z.open(zi, "w", force_zip64=True) as fp:
                    np.lib.format.write_array(fp, np.ascontiguousarray(a),
                                              allow_pickle=False)
    os.replace(tmp, path)
