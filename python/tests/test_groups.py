"""Group tables from Python (issue 37, docs/replay.md "Groups" and
"Admission filters"): w.append_group(samples) writes a group of ragged
samples as one item, b.groups() gives a batch's group offsets beside each
ragged leaf's per-sample offsets (shm and stream mode), the table's
filters drop groups whose reward has no variance or whose mean is out of
bounds, w.take_dropped() says which (so a producer can make others), and
Stats count them; bad groups raise errors that name the problem."""
import numpy as np
import pytest

import chime
import conftest

SPEC = "tokens:i32[<=16], reward:f32[]"
TABLES = [
    {"name": "g", "spec": SPEC, "capacity": 100, "sampler": "fifo",
     "group_max": 4},
    {"name": "f", "spec": SPEC, "capacity": 100, "sampler": "fifo",
     "group_max": 4,
     "filters": [{"leaf": "reward", "drop": "zero_variance"},
                 {"leaf": "reward", "drop": "mean_outside", "min": 0,
                  "max": 10}]},
    {"name": "p", "spec": SPEC, "capacity": 100},
]


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("groups"),
                             tables=TABLES) as (proc, a):
        yield a
        assert proc.poll() is None, "chimed died during the tests"


def group(g, rewards=None):
    n = g % 4 + 1
    return [{"tokens": np.arange(g * 100 + j * 10,
                                 g * 100 + j * 10 + (g + j) % 17,
                                 dtype=np.int32),
             "reward": float(g + j) if rewards is None else rewards[j]}
            for j in range(n)]


def check(b, groups):
    go = np.asarray(b.groups())
    assert go[0] == 0 and len(go) == b.count + 1 == len(groups) + 1
    tok, off = np.asarray(b["tokens"]), np.asarray(b.offsets("tokens"))
    rew = np.asarray(b["reward"])
    assert len(off) == go[-1] + 1 and len(rew) == go[-1]
    for k, g in enumerate(groups):
        want = group(g)
        assert go[k + 1] - go[k] == len(want)
        for j, s in enumerate(want):
            i = go[k] + j
            assert (tok[off[i]:off[i + 1]] == s["tokens"]).all()
            assert rew[i] == s["reward"]


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_groups_round_trip(addr, mode):
    with chime.Client(addr) as c:
        with c.writer("g") as w:
            for g in range(8):
                w.append_group(group(g))
        with c.stream("g", batch_size=4, slots=4, mode=mode) as s:
            for first in (0, 4):
                b = s.next(timeout=10)
                check(b, range(first, first + 4))
                b.release()


def test_filters_drop_and_report(addr):
    with chime.Client(addr) as c:
        with c.writer("f") as w:
            w.append_group(group(1))                          # kept
            w.append_group(group(2, [3.0, 3.0, 3.0]))         # no variance
            w.append_group(group(3, [20.0, 30.0, 40.0, 50.0]))  # mean > 10
            w.append_group(group(5))                          # kept
            w.flush()
            assert w.take_dropped() == [
                (1, 2, "zero_variance"), (2, 3, "mean_outside")]
            assert w.take_dropped() == []
        t = next(t for t in c.stats()["tables"] if t["name"] == "f")
        assert t["dropped_zero_variance"] == 1
        assert t["dropped_mean_outside"] == 1
        assert t["inserts"] == 4 and t["size"] == 2
        with c.stream("f", batch_size=2, slots=4) as s:
            check(s.next(timeout=10), [1, 5])


def test_bad_groups(addr):
    with chime.Client(addr) as c:
        with c.writer("g") as w:
            with pytest.raises(ValueError, match="group of 0 samples"):
                w.append_group([])
            with pytest.raises(ValueError, match="group of 5 samples"):
                w.append_group(group(3) + group(0))
            with pytest.raises(chime.Error, match="no leaf 'reward'"):
                w.append_group([{"tokens": np.zeros(3, np.int32)}])
            with pytest.raises(chime.Error, match="tokens"):
                w.append_group([{"tokens": np.zeros(17, np.int32),
                                 "reward": 0.0}])
        with c.writer("p") as w:
            with pytest.raises(ValueError, match="not a group table"):
                w.append_group(group(0))


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_groups_over_shards(tmp_path, mode):
    """A sharded client's writer appends groups to its shard as to one
    server, and its stream hands out whole groups from either shard."""
    dirs = [tmp_path / f"shard{k}" for k in (1, 2)]
    for d in dirs:
        d.mkdir()
    tables = [dict(TABLES[0], sampler="uniform")]
    with conftest.run_chimed(dirs[0], tables, extra={"shard": 1}) as (_, a1), \
            conftest.run_chimed(dirs[1], tables,
                                extra={"shard": 2}) as (_, a2):
        with chime.Client(f"{a1},{a2}") as c:
            for _ in range(4):  # writers pick their shards in turn
                with c.writer("g") as w:
                    for g in range(8):
                        w.append_group(group(g))
            sizes = []
            for a in (a1, a2):
                with chime.Client(a) as one:
                    sizes += [next(t for t in one.stats()["tables"]
                                   if t["name"] == "g")["size"]]
            assert sum(sizes) == 32 and min(sizes) > 0
            with c.stream("g", batch_size=4, slots=4, mode=mode) as s:
                for _ in range(6):
                    with s.next(timeout=20) as b:
                        go = np.asarray(b.groups())
                        tok = np.asarray(b["tokens"])
                        off = np.asarray(b.offsets("tokens"))
                        for k in range(b.count):
                            n = go[k + 1] - go[k]
                            rows = [tok[off[i]:off[i + 1]]
                                    for i in range(go[k], go[k + 1])]
                            # whole: one of the groups written, every
                            # sample of it, in order
                            assert any(
                                len(group(g)) == n and all(
                                    np.array_equal(r, s["tokens"])
                                    for r, s in zip(rows, group(g)))
                                for g in range(8))


def test_groups_checkpointed_whole(tmp_path):
    """A checkpoint keeps each group as one item; a restart that restores
    it serves the same groups, whole, with their keys, and a new group
    takes a later key."""
    ckpt = tmp_path / "ckpt"
    extra = {"checkpoint": {"dir": str(ckpt), "keep": 2}}
    tables = [TABLES[0]]
    with conftest.run_chimed(tmp_path, tables, extra=extra) as (_, addr):
        with chime.Client(addr) as c:
            with c.writer("g") as w:
                for g in range(6):
                    w.append_group(group(g))
            path = c.checkpoint()["path"]
    with conftest.run_chimed(tmp_path, tables, extra=extra,
                             args=("--restore", path)) as (_, addr):
        with chime.Client(addr) as c:
            t = next(t for t in c.stats()["tables"] if t["name"] == "g")
            assert t["size"] == 6
            with c.writer("g") as w:
                w.append_group(group(6))
            with c.stream("g", batch_size=7, slots=2) as s:
                b = s.next(timeout=10)
                check(b, range(7))
                keys = [int(k) & 0xffffffffffff for k in b.info["key"]]
                assert keys[:6] == list(range(1, 7)) and keys[6] > 6
