"""A stream over several connections from Python (docs/remote.md, "More
connections"): the `connections` keyword reaches the library, the
batches come whole and in order over 4 TCP connections, each fifo item
once, and a count out of range is refused."""
import numpy as np
import pytest

import chime
import conftest

ITEMS = 4000
TABLES = [{"name": "q", "spec": "x:u64[], pad:u8[1000]", "capacity": 10000,
           "sampler": "fifo", "min_size": 1}]


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("conns"),
                             tables=TABLES) as (proc, a):
        yield a
        assert proc.poll() is None, "chimed died during the tests"


def test_four_connections_in_order(addr):
    pad = np.arange(1000, dtype=np.uint64).astype(np.uint8)
    with chime.Client(addr) as c:
        with c.writer("q") as w:
            for i in range(ITEMS):
                w.append({"x": i, "pad": pad})
        got = []
        with c.stream("q", batch_size=8, mode="stream", slots=16,
                      connections=4) as s:
            assert s.mode == "stream"
            while len(got) < ITEMS:
                with s.next(timeout=10) as b:
                    got.extend(int(v) for v in np.array(b["x"]))
                    assert (np.array(b["pad"]) == pad).all()
        # fifo hands items out in order, and the stream its batches
        assert got == list(range(ITEMS))


@pytest.mark.parametrize("n", [17, -1])
def test_connections_out_of_range(addr, n):
    with chime.Client(addr) as c:
        with pytest.raises((chime.InvalidArgumentError, OverflowError,
                            ValueError), match="connections"):
            c.stream("q", batch_size=8, mode="stream", connections=n)
