"""A stream's ready_bytes from Python: chimed samples at most
max(2, ready_bytes / batch bytes) batches ahead of the learner's takes
(docs/protocol.md, Open.ready_bytes); 0 fills every slot."""
import pytest

import chime
import conftest

TABLES = [{"name": "u", "spec": "x:u64[]", "capacity": 1000,
           "sampler": "uniform", "min_size": 1}]
SLOTS = 8


@pytest.fixture(scope="module")
def addr(tmp_path_factory):
    with conftest.run_chimed(tmp_path_factory.mktemp("ready"),
                             tables=TABLES) as (proc, a):
        with chime.Client(a) as c, c.writer("u") as w:
            for i in range(100):
                w.append({"x": i})
        yield a
        assert proc.poll() is None, "chimed died during the tests"


def published(c):
    """The batches chimed published into its one stream's ring."""
    streams = c.stats()["streams"]
    assert len(streams) == 1
    return streams[0]["batches"]


def settle(c, want):
    """Waits until chimed published `want` batches, then asks 20 times
    more (as many round trips as a sampler needs to fill a ring) and
    returns what it published: `want` unless the limit let more through."""
    conftest.wait_until(lambda: published(c) >= want, 10.0)
    n = published(c)
    for _ in range(20):
        if n != want:
            break
        n = published(c)
    return n


def test_ready_bytes_limits_batches_ahead(addr):
    with chime.Client(addr) as c:
        # 1 byte is below one batch: the least limit, 2 batches
        with c.stream("u", batch_size=4, slots=SLOTS, mode="shm",
                      ready_bytes=1) as s:
            assert settle(c, 2) == 2
            held = [s.next(timeout=10) for _ in range(3)]
            assert settle(c, 5) == 5  # a take lets one more be sampled
            for b in held:
                b.release()
            assert settle(c, 5) == 5  # releases alone sample nothing


def test_no_ready_bytes_fills_every_slot(addr):
    with chime.Client(addr) as c:
        with c.stream("u", batch_size=4, slots=SLOTS, mode="shm") as s:
            conftest.wait_until(lambda: published(c) >= SLOTS, 10.0)
            with s.next(timeout=10) as b:
                assert b.count == 4


def test_ready_bytes_negative_refused(addr):
    with chime.Client(addr) as c:
        with pytest.raises(chime.InvalidArgumentError, match="ready_bytes"):
            c.stream("u", batch_size=4, ready_bytes=-1)
