"""The integer arguments of the Python API (python/src/args.c): a negative
count, one past its C type (32 bits for batch_size, slots, prefetch and
max_inflight, 64 for versions and ready_bytes), a bool or a non-integer
is refused by name with chime.InvalidArgumentError, never wrapped round
into another value; numpy integers are taken as ints. A version that is
refused changes nothing on the server: a wrapped -1 would have been the
newest version 2^64 - 1 and emptied a table with a staleness gate."""
import numpy as np
import pytest

import chime
import conftest

TABLES = [{"name": "g", "spec": "x:u64[]", "capacity": 1000,
           "sampler": "fifo", "max_staleness": 2}]
U32_PAST = 2**32 + 4  # wrapped to 32 bits this is 4, a valid count
BAD_COUNTS = [-1, U32_PAST, True, 2.0, "4"]
BAD_VERSIONS = [-1, 2**64, False, 1.5, "3"]


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("args"),
                             tables=TABLES) as (proc, a):
        yield a
        assert proc.poll() is None, "chimed died during the tests"


def table(c):
    return next(t for t in c.info()["tables"] if t["name"] == "g")


@pytest.mark.parametrize("name", ["batch_size", "slots", "prefetch"])
@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_stream_counts_refused(addr, name, bad):
    with chime.Client(addr) as c:
        kw = {"batch_size": 4, name: bad}
        with pytest.raises(chime.InvalidArgumentError, match=name):
            c.stream("g", **kw)


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_writer_max_inflight_refused(addr, bad):
    with chime.Client(addr) as c:
        with pytest.raises(chime.InvalidArgumentError, match="max_inflight"):
            c.writer("g", max_inflight=bad)


def test_versions_refused_change_nothing(addr):
    with chime.Client(addr) as c:
        with c.writer("g", version=5) as w:
            for i in range(10):
                w.append({"x": i})
        assert table(c)["newest_version"] == 5
        for bad in BAD_VERSIONS:
            with pytest.raises(chime.InvalidArgumentError, match="version"):
                c.writer("g", version=bad)
            with pytest.raises(chime.InvalidArgumentError, match="version"):
                c.set_version("g", bad)
            with pytest.raises(chime.InvalidArgumentError, match="version"):
                c.stream("g", batch_size=2, version=bad)
            with c.writer("g") as w:
                with pytest.raises(chime.InvalidArgumentError,
                                   match="version"):
                    w.append({"x": 1}, version=bad)
                with pytest.raises(chime.InvalidArgumentError,
                                   match="version"):
                    w.extend({"x": np.arange(2, dtype=np.uint64)},
                             version=bad)
            with c.stream("g", batch_size=2) as s:
                with pytest.raises(chime.InvalidArgumentError,
                                   match="version"):
                    s.set_version(bad)
        t = table(c)
        assert t["newest_version"] == 5
        assert t["size"] == 10


def test_numpy_integers_taken(addr):
    with chime.Client(addr) as c:
        with c.writer("g", max_inflight=np.uint32(4),
                      version=np.uint64(5)) as w:
            w.append({"x": 100}, version=np.int64(5))
        with c.stream("g", batch_size=np.int64(2), slots=np.uint16(4),
                      version=np.uint64(5), ready_bytes=np.int32(0)) as s:
            assert s.next(timeout=10).count == 2
        assert c.set_version("g", np.uint64(5)) == 5
