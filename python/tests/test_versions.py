"""Policy versions and staleness gates from Python (issue 25,
docs/replay.md): w.append(sample, version=v) and the writer's default,
b.info["version"] and b.info["staleness"], stream.set_version(v),
client.set_version(table, v), the table config key max_staleness, a
version going backwards allowed and changing nothing, and both over two
shards (a sharded client's stream drops what its rings drew before)."""
import time

import numpy as np
import pytest

import chime
import conftest

TABLES = [
    {"name": "u", "spec": "x:u64[]", "capacity": 1000, "sampler": "uniform"},
    {"name": "g", "spec": "x:u64[]", "capacity": 1000, "sampler": "uniform",
     "max_staleness": 2},
]


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("versions"),
                             tables=TABLES) as (proc, a):
        yield a
        assert proc.poll() is None, "chimed died during the tests"


def table_stats(c, name):
    return next(t for t in c.stats()["tables"] if t["name"] == name)


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.01)


def test_versions_in_info(addr):
    with chime.Client(addr) as c:
        with c.writer("u", version=3) as w:
            for i in range(10):
                w.append({"x": 3000 + i})          # the writer's default
            for v in (4, 5):
                for i in range(10):
                    w.append({"x": v * 1000 + i}, version=v)
            w.extend({"x": np.arange(6000, 6010, dtype=np.uint64)},
                     version=6)
        info = next(t for t in c.info()["tables"] if t["name"] == "u")
        assert info["newest_version"] == 6
        assert info["max_staleness"] == 0
        for mode in ("shm", "stream"):
            with c.stream("u", batch_size=16, slots=4, mode=mode) as s:
                for _ in range(3):
                    b = s.next(timeout=10)
                    x = np.asarray(b["x"])
                    assert (b.info["version"] == x // 1000).all()
                    assert (b.info["staleness"] == 6 - x // 1000).all()


def test_gate_and_set_version(addr):
    with chime.Client(addr) as c:
        assert c.info()["tables"][1]["max_staleness"] == 2
        with c.writer("g") as w:
            for v in range(1, 7):
                for i in range(20):
                    w.append({"x": v * 1000 + i}, version=v)
        # 6 - 2 = 4: versions 1..3 left as newer ones came
        wait_for(lambda: table_stats(c, "g")["removed_stale"] == 60)
        assert table_stats(c, "g")["size"] == 60
        with c.stream("g", batch_size=8, slots=4, version=5) as s:
            b = s.next(timeout=10)
            assert (b.info["version"] >= 4).all()
            s.set_version(8)  # 4 and 5 leave: 8 - 2 = 6
            wait_for(lambda: table_stats(c, "g")["removed_stale"] == 100)
            for _ in range(5):
                b = s.next(timeout=10)
                assert (b.info["version"] == 6).all()
                assert (b.info["staleness"] <= 2).all()
            st = s.stats()  # batches drawn before 8 that next() dropped
            assert 0 <= st["dropped_stale"] <= st["batches"] - 6
            s.set_version(2)  # backwards: allowed, nothing changes
            assert c.set_version("g", 3) == 8
            assert table_stats(c, "g")["size"] == 20
            assert c.set_version("g", 9) == 9  # from another process
            assert table_stats(c, "g")["size"] == 0
            assert table_stats(c, "g")["newest_version"] == 9
        with pytest.raises(chime.Error):
            c.set_version("nope", 1)
        with pytest.raises(chime.InvalidArgumentError, match="version"):
            c.set_version("g", -1)


SHARD_TABLES = [{"name": "q", "spec": "x:u64[]", "capacity": 1000,
                 "sampler": "fifo", "max_staleness": 2}]


@pytest.mark.parametrize("mode", ["shm", "stream"])
def test_set_version_over_shards(tmp_path, mode):
    """A sharded client's stream.set_version reaches every shard's
    sub-stream: batches its rings drew before it are dropped, as on one
    server; client.set_version raises every shard's newest version."""
    dirs = [tmp_path / f"shard{k}" for k in (1, 2)]
    for d in dirs:
        d.mkdir()
    with conftest.run_chimed(dirs[0], SHARD_TABLES,
                             extra={"shard": 1}) as (_, a1), \
            conftest.run_chimed(dirs[1], SHARD_TABLES,
                                extra={"shard": 2}) as (_, a2):
        ones = [chime.Client(a) for a in (a1, a2)]

        def write(version):
            for k, one in enumerate(ones):
                with one.writer("q") as w:
                    for i in range(40):
                        w.append({"x": k << 32 | i}, version=version)

        write(1)
        with chime.Client(f"{a1},{a2}") as c:
            with c.stream("q", batch_size=4, slots=4, mode=mode,
                          version=1) as s:
                # both rings hold batches of version 1, none taken yet
                wait_for(lambda: all(table_stats(o, "q")["samples"] >= 8
                                     for o in ones))
                s.set_version(10)
                write(10)
                fresh = 0
                while fresh < 80:
                    with s.next(timeout=20) as b:
                        assert (b.info["version"] == 10).all()
                        fresh += b.count
                assert s.stats()["dropped_stale"] >= 2
            assert c.set_version("q", 11) == 11
            assert [table_stats(o, "q")["newest_version"]
                    for o in ones] == [11, 11]
        for one in ones:
            one.close()


def test_chimectl_info_shows_versions(addr):
    """`chimectl info` (text) has a VERSIONS row for each table that uses
    versions, with what GetInfo says: newest version, gate (- for none),
    staleness weight."""
    with chime.Client(addr) as c:
        with c.writer("u", version=7) as w:
            w.append({"x": 7000})
        tables = {t["name"]: t for t in c.info()["tables"]}
    out = conftest.chimectl("info", addr)
    head, _, rest = out.partition("\nVERSIONS\n")
    assert rest, out
    lines = rest.split("\n\n")[0].splitlines()
    assert lines[0].split() == ["TABLE", "NEWEST_VERSION", "MAX_STALENESS",
                                "STALENESS_WEIGHT"]
    rows = {r.split()[0]: r.split()[1:] for r in lines[1:]}
    for name, t in tables.items():
        used = t["newest_version"] or t["max_staleness"]
        assert (name in rows) == bool(used), (name, out)
        if used:
            gate = str(t["max_staleness"]) if t["max_staleness"] else "-"
            assert rows[name] == [str(t["newest_version"]), gate,
                                  t["staleness_weight"]]
    assert rows["u"][1] == "-" and int(rows["u"][0]) >= 7
    assert rows["g"][1] == "2"
