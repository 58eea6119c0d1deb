"""chime.dataset and `chimectl import/export` against real chimed
processes (docs/datasets.md): HDF5 files made with h5py in Minari's and
D4RL's layouts and .npz files go in whole; a malformed or truncated file
is refused naming the dataset and row with nothing imported (or, asked,
the rows before the bad block); an import passes a rate limiter that
stalls a normal writer; export is a snapshot (every item whole, the count
within the table's at the instant) while a writer runs; export -> import
-> export is byte-identical; over two shards."""
import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

import chime
import chime.dataset as ds
import conftest

h5py = pytest.importorskip("h5py")

SPEC = "obs:f32[3], action:f32[2], reward:f32[], next_obs:f32[3], done:bool[]"
MAP = {"obs": "observations", "action": "actions", "reward": "rewards",
       "next_obs": "next_observations", "done": "terminals"}


def plain(name, **kw):
    t = {"name": name, "spec": SPEC, "capacity": 10000, "sampler": "fifo",
         "min_size": 1}
    t.update(kw)
    return t


TABLES = [plain(n) for n in ("d4rl", "minari", "npz", "rt_a", "rt_b",
                             "rt_c", "rt_d", "bad", "part", "cli", "cli2")]
TABLES += [plain("limited", sampler="uniform", samples_per_insert=1.0,
                 min_size=10, error_buffer=10),
           plain("limited2", sampler="uniform", samples_per_insert=1.0,
                 min_size=10, error_buffer=10),
           {"name": "seq", "spec": "ep:u32[], t:u32[]",
            "capacity_steps": 256, "sequence_length": 4, "stride": 1,
            "episode_end": "drop", "sampler": "fifo",
            "max_times_sampled": 1},
           {"name": "whole", "spec": "a:u64[], b:u64[4]",
            "capacity": 200000, "sampler": "uniform", "min_size": 1}]


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("chimed"), TABLES) as (
            proc, a):
        yield a
        assert proc.poll() is None, "chimed died during the tests"


@pytest.fixture
def client(addr):
    with chime.Client(addr) as c:
        yield c


def size(client, table):
    return ds.table_info(client, table)["size"]


def transitions(n, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n + 1, 3)).astype(np.float32)
    done = np.zeros(n, dtype=bool)
    done[n // 3] = done[n - 1] = True
    return {"observations": obs[:n], "actions":
            rng.standard_normal((n, 2)).astype(np.float32),
            "rewards": rng.standard_normal(n).astype(np.float32),
            "next_observations": obs[1:], "terminals": done,
            "timeouts": np.zeros(n, dtype=bool)}


def d4rl_file(path, tr, **kw):
    with h5py.File(path, "w") as f:
        for k, v in tr.items():
            f.create_dataset(k, data=v, **kw)
    return path


def minari_file(path, lengths, seed=1):
    """Episodes of the given lengths; returns the transitions they hold."""
    rng = np.random.default_rng(seed)
    out = {k: [] for k in ("obs", "action", "reward", "next_obs", "done")}
    with h5py.File(path, "w") as f:
        for i, n in enumerate(lengths):
            g = f.create_group(f"episode_{i}")
            obs = rng.standard_normal((n + 1, 3)).astype(np.float32)
            act = rng.standard_normal((n, 2)).astype(np.float32)
            rew = rng.standard_normal(n).astype(np.float32)
            term = np.zeros(n, dtype=bool)
            term[-1] = True
            g["observations"], g["actions"], g["rewards"] = obs, act, rew
            g["terminations"] = term
            g["truncations"] = np.zeros(n, dtype=bool)
            g.create_group("infos")["x"] = np.zeros(n + 1)
            for k, v in (("obs", obs[:n]), ("action", act), ("reward", rew),
                         ("next_obs", obs[1:]), ("done", term)):
                out[k].append(v)
        f.attrs["total_episodes"] = len(lengths)
    return {k: np.concatenate(v) for k, v in out.items()}


def assert_table_holds(client, table, want):
    got = ds.export_table(client, table)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_import_d4rl_flat_layout(client, tmp_path):
    tr = transitions(500)
    r = ds.import_file(client, d4rl_file(tmp_path / "d.hdf5", tr), "d4rl",
                       mapping=MAP)
    assert r == {"rows": 500, "episodes": 2, "shards": 1}
    assert_table_holds(client, "d4rl", {
        "obs": tr["observations"], "action": tr["actions"],
        "reward": tr["rewards"], "next_obs": tr["next_observations"],
        "done": tr["terminals"]})


def test_import_minari_layout(client, tmp_path):
    want = minari_file(tmp_path / "m.hdf5", [5, 9, 3])
    m = dict(MAP, done="terminations")
    r = ds.import_file(client, tmp_path / "m.hdf5", "minari", mapping=m)
    assert r["rows"] == 17 and r["episodes"] == 3
    assert_table_holds(client, "minari", want)


def test_import_npz_with_priorities(client, tmp_path):
    tr = transitions(300, seed=3)
    pr = np.linspace(0.5, 2.0, 300)
    np.savez(tmp_path / "t.npz", prio=pr, **tr)
    ds.import_file(client, str(tmp_path / "t.npz"), "npz", mapping=MAP,
                   priorities="prio")
    got = ds.export_table(client, "npz")
    np.testing.assert_array_equal(got["_priority"], pr)
    np.testing.assert_array_equal(got["action"], tr["actions"])


def test_sequence_table_gets_episodes(client, tmp_path):
    """Episodes of 5, 7 and 3 steps with T=4, stride 1, drop: 2 + 4 + 0
    windows, each within one episode."""
    lengths = [5, 7, 3]
    ep = np.concatenate([np.full(n, i, np.uint32) for i, n in
                         enumerate(lengths)])
    t = np.concatenate([np.arange(n, dtype=np.uint32) for n in lengths])
    term = np.concatenate([np.arange(n) == n - 1 for n in lengths])
    np.savez(tmp_path / "s.npz", ep=ep, t=t, terminals=term)
    r = ds.import_file(client, str(tmp_path / "s.npz"), "seq")
    assert r["episodes"] == 3
    assert size(client, "seq") == 6
    with client.stream("seq", batch_size=6, mode="stream") as s:
        b = s.next()
        e, tt = np.array(b["ep"]), np.array(b["t"])
        b.release()
    assert (e == e[:, :1]).all()
    assert (np.diff(tt, axis=1) == 1).all()
    assert sorted(map(tuple, np.c_[e[:, 0], tt[:, 0]])) == [
        (0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3)]


@pytest.mark.parametrize("ext", ["hdf5", "npz"])
def test_round_trip_byte_identical(client, tmp_path, ext):
    a, b = ("rt_a", "rt_b") if ext == "hdf5" else ("rt_c", "rt_d")
    tr = transitions(700, seed=5)
    ds.import_file(client, d4rl_file(tmp_path / "src.hdf5", tr), a,
                   mapping=MAP)
    f1, f2 = tmp_path / f"1.{ext}", tmp_path / f"2.{ext}"
    assert ds.export_file(client, a, str(f1)) == 700
    ds.import_file(client, str(f1), b)
    assert ds.export_file(client, b, str(f2)) == 700
    assert f1.read_bytes() == f2.read_bytes()
    back = ds.read(str(f1))
    np.testing.assert_array_equal(back.fields["obs"], tr["observations"])


def gzip_file(path, tr):
    """tr in chunks of 100 rows, each compressed."""
    with h5py.File(path, "w") as f:
        for k, v in tr.items():
            f.create_dataset(k, data=v, chunks=(100,) + v.shape[1:],
                             compression="gzip")
    return path


def corrupt_chunk(path, name):
    """Overwrites the bytes of the second chunk of a gzip dataset."""
    with h5py.File(path, "r") as f:
        info = f[name].id.get_chunk_info(1)
    with open(path, "r+b") as fp:
        fp.seek(info.byte_offset)
        fp.write(b"\xff" * info.size)
    return 100  # the second chunk's first row (chunks of 100 rows)


def test_malformed_files_import_nothing(client, tmp_path):
    tr = transitions(400, seed=7)
    short = dict(tr, rewards=tr["rewards"][:399])
    with pytest.raises(ds.DatasetError) as e:
        ds.import_file(client, d4rl_file(tmp_path / "s.hdf5", short), "bad",
                       mapping=MAP)
    assert e.value.dataset == "rewards" and e.value.row == 399
    assert "'rewards', row 399" in str(e.value)

    p = gzip_file(tmp_path / "c.hdf5", tr)
    row = corrupt_chunk(p, "actions")
    with pytest.raises(ds.DatasetError) as e:
        ds.import_file(client, p, "bad", mapping=MAP)
    assert e.value.dataset == "actions" and e.value.row == row

    np.savez(tmp_path / "t.npz", **tr)
    data = (tmp_path / "t.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[:len(data) // 2])
    with pytest.raises(ds.DatasetError) as e:
        ds.import_file(client, str(tmp_path / "cut.npz"), "bad", mapping=MAP)
    assert e.value.path == str(tmp_path / "cut.npz")

    pr = np.ones(400)
    pr[123] = np.nan
    np.savez(tmp_path / "p.npz", prio=pr, **tr)
    with pytest.raises(ds.DatasetError) as e:
        ds.import_file(client, str(tmp_path / "p.npz"), "bad", mapping=MAP,
                       priorities="prio")
    assert e.value.dataset == "prio" and e.value.row == 123

    with pytest.raises(ds.DatasetError, match="'nope'.*missing"):
        ds.import_file(client, str(tmp_path / "p.npz"), "bad",
                       mapping=dict(MAP, obs="nope"))
    with pytest.raises(ValueError, match="no leaf 'ob'"):
        ds.import_file(client, str(tmp_path / "p.npz"), "bad",
                       mapping=dict(MAP, ob="observations"))
    (tmp_path / "x.hdf5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 40)
    with pytest.raises(ds.DatasetError, match="not a readable HDF5"):
        ds.import_file(client, tmp_path / "x.hdf5", "bad", mapping=MAP)
    assert size(client, "bad") == 0


def test_npz_member_cut_short_names_row(tmp_path):
    """A stored .npy member whose bytes end early: its first missing row."""
    import zipfile
    a = np.arange(1000, dtype=np.float64).reshape(500, 2)
    with zipfile.ZipFile(tmp_path / "z.npz", "w") as z:
        with z.open("x.npy", "w") as fp:
            np.lib.format.write_array(fp, a)
        raw = z.read("x.npy")
    with zipfile.ZipFile(tmp_path / "z.npz", "w") as z:
        z.writestr("x.npy", raw[:len(raw) - 16 * 100])
    with pytest.raises(ds.DatasetError) as e:
        ds.read(str(tmp_path / "z.npz"))
    assert e.value.dataset == "x" and e.value.row == 400


def test_partial_keeps_rows_before_the_bad_block(client, tmp_path):
    tr = transitions(600, seed=9)
    p = gzip_file(tmp_path / "c.hdf5", tr)
    corrupt_chunk(p, "rewards")
    old = ds._dsfile.BLOCK_ROWS
    try:
        ds._dsfile.BLOCK_ROWS = 25  # pieces of 100 rows
        with pytest.raises(ds.DatasetError, match=r"rows \[0, 100\) imported"):
            ds.import_file(client, p, "part", mapping=MAP, partial=True)
    finally:
        ds._dsfile.BLOCK_ROWS = old
    assert size(client, "part") == 100


def test_import_passes_the_rate_limiter(client, tmp_path):
    """samples_per_insert 1, min_size 10, error_buffer 10: a writer stalls
    after about 20 inserts with nobody sampling; the import does not."""
    tr = transitions(1000, seed=11)
    ds.import_file(client, d4rl_file(tmp_path / "d.hdf5", tr), "limited",
                   mapping=MAP)
    assert size(client, "limited") == 1000
    with pytest.raises(chime.Error) as e:
        with chime.Writer(client, "limited2", timeout=1.0) as w:
            w.extend({k: tr[MAP[k]] for k in MAP})
            w.flush()
    assert "ack" in str(e.value)
    assert size(client, "limited2") < 1000


def test_export_while_a_writer_runs(client):
    """Every exported item whole (b is a repeated), oldest first (a rises
    by one), and as many as the table held between before and after."""
    stop = threading.Event()

    def write():
        with chime.Writer(client, "whole") as w:
            i = 0
            while not stop.is_set():
                a = np.arange(i, i + 500, dtype=np.uint64)
                w.extend({"a": a, "b": np.repeat(a[:, None], 4, axis=1)})
                i += 500

    t = threading.Thread(target=write)
    t.start()
    try:
        conftest.wait_until(lambda: size(client, "whole") > 5000, 30)
        before = size(client, "whole")
        got = ds.export_table(client, "whole")
        after = size(client, "whole")
    finally:
        stop.set()
        t.join()
    n = got["a"].shape[0]
    assert before <= n <= after
    assert (got["b"] == got["a"][:, None]).all()
    assert (np.diff(got["a"].astype(np.int64)) == 1).all()
    assert (np.diff(got["_key"].astype(np.int64)) > 0).all()


def test_export_refuses_a_sequence_table(client):
    with pytest.raises(chime.Error, match="sequence table"):
        client.export("seq", lambda ch: None)
    with pytest.raises(chime.Error, match="not found"):
        client.export("nope", lambda ch: None)


def test_export_stops_when_fn_raises(client, tmp_path):
    ds.import_file(client, d4rl_file(tmp_path / "d.hdf5", transitions(50)),
                   "cli2", mapping=MAP)

    def boom(ch):
        raise KeyError("stop here")
    with pytest.raises(KeyError, match="stop here"):
        client.export("cli2", boom)
    assert ds.export_table(client, "cli2")["obs"].shape == (50, 3)


def test_over_two_shards(tmp_path):
    tables = [plain("t", sampler="uniform")]
    tr = transitions(1000, seed=13)
    f = d4rl_file(tmp_path / "d.hdf5", tr)
    with conftest.run_shards(tmp_path, tables) as addrs:
        with chime.Client(",".join(addrs)) as c:
            r = ds.import_file(c, f, "t", mapping=MAP)
            assert r["shards"] == 2
            got = ds.export_table(c, "t")
        sizes = []
        for a in addrs:
            with chime.Client(a) as one:
                sizes.append(size(one, "t"))
    assert sum(sizes) == 1000 and min(sizes) > 0
    order = np.argsort(got["reward"])
    want = np.argsort(tr["rewards"])
    np.testing.assert_array_equal(got["obs"][order], tr["observations"][want])


def chimectl(*args, env=None):
    binary = pathlib.Path(os.environ.get(
        "CHIMED", conftest.ROOT / "build" / "src" / "server" / "chimed"))
    binary = binary.parents[2] / "examples" / "chimectl"
    e = dict(os.environ, CHIME_PYTHON=sys.executable)
    e.update(env or {})
    return subprocess.run([str(binary), *args], capture_output=True,
                          text=True, timeout=60, env=e)


def test_chimectl_import_export(addr, client, tmp_path):
    tr = transitions(200, seed=17)
    f = d4rl_file(tmp_path / "d.hdf5", tr)
    maps = [x for k, v in MAP.items() for x in ("--map", f"{k}={v}")]
    r = chimectl("import", str(f), "cli", addr, *maps)
    assert r.returncode == 0, r.stderr
    assert "imported 200 rows" in r.stdout
    r = chimectl("export", "cli", str(tmp_path / "o.npz"), addr)
    assert r.returncode == 0, r.stderr
    back = ds.read(str(tmp_path / "o.npz"))
    np.testing.assert_array_equal(back.fields["action"], tr["actions"])

    short = dict(tr, actions=tr["actions"][:150])
    bad = d4rl_file(tmp_path / "bad.hdf5", short)
    r = chimectl("import", str(bad), "cli", addr, *maps)
    assert r.returncode == 1
    assert "dataset 'actions', row 150" in r.stderr, r.stderr
    assert size(client, "cli") == 200
    r = chimectl("import", str(f), "nope", addr)
    assert r.returncode == 1 and "table 'nope' not found" in r.stderr
    r = chimectl("import", str(f), "cli", addr, "--map", "obs")
    assert r.returncode == 1 and "LEAF=NAME" in r.stderr
    r = chimectl("import", str(f), "cli", addr,
                 env={"CHIME_PYTHON": "/nonexistent/python3"})
    assert r.returncode == 1 and "python3-h5py" in r.stderr


def test_server_stop_during_an_export(tmp_path):
    """chimed told to stop while an export is under way (its reader has
    taken one chunk of several): the export ends with an error, chimed
    lets the snapshot's rows go and exits 0."""
    tables = [{"name": "big", "spec": "x:u8[4096]", "capacity": 8192,
               "sampler": "uniform"}]
    with conftest.run_chimed(tmp_path, tables) as (proc, a):
        with chime.Client(a) as c:
            with c.writer("big") as w:
                w.extend({"x": np.zeros((8192, 4096), np.uint8)})
            seen = []

            def stop_once(ch):
                seen.append(ch["count"])
                if len(seen) == 2:
                    proc.terminate()

            with pytest.raises(chime.Error):
                c.export("big", stop_once)
            assert proc.wait(timeout=conftest.STOP_TIMEOUT_S) == 0
        assert seen[0] == 0 and sum(seen) < 8192
