"""chimed driven through a client generated from proto/chime.proto alone,
the way a user of another language would (docs/protocol.md)."""
import queue
import random
import struct

import grpc
import pytest

RPC_TIMEOUT_S = 30
TABLE = "interop"
SPEC = [("obs", "u16", [300, 300]), ("action", "i32", []), ("mask", "u8", [3])]
DTYPE_SIZE = {"u8": 1, "i8": 1, "bool": 1, "u16": 2, "i16": 2, "f16": 2,
              "bf16": 2, "u32": 4, "i32": 4, "f32": 4, "u64": 8, "i64": 8,
              "f64": 8}
# The fields of a sample info record this client knows (chime_sample_info_t,
# include/chime/spec.h): key, probability, times_sampled, reserved,
# insert_time_ns, priority, table_size, episode_id, first_step, length. The
# records' size comes from the Layout (info_record_bytes); a larger record
# keeps these fields first.
SAMPLE_INFO = struct.Struct("<QdIIQdQQII")
# chimed's config (conftest.py, chimed). "interop" has a leaf big enough that
# a batch of 8 goes out in several chunks (each message under 1 MiB) and a
# small one whose array is not a multiple of 64 bytes, so leaf offsets matter.
CONFIG = """{"tables": [
  {"name": "interop", "spec": "obs:u16[300,300], action:i32[], mask:u8[3]",
   "capacity": 256, "sampler": "fifo", "min_size": 1}
]}
"""
SAMPLES = 32
PER_REQUEST = 8
BATCH = 8


def leaf_bytes(dtype, shape):
    n = DTYPE_SIZE[dtype]
    for d in shape:
        n *= d
    return n


def spec_tuples(leaves):
    return [(leaf.name, leaf.dtype, list(leaf.shape)) for leaf in leaves]


def test_get_info(pb, stub):
    info = stub.GetInfo(pb[0].GetInfoRequest(), timeout=RPC_TIMEOUT_S)
    assert info.version
    assert info.hostname
    (table,) = [t for t in info.tables if t.name == TABLE]
    assert spec_tuples(table.spec) == SPEC
    assert table.spec_text == "obs:u16[300,300],action:i32[],mask:u8[3]"
    assert table.sampler == "fifo"
    assert table.capacity == 256
    assert table.sample_bytes == sum(leaf_bytes(d, s) for _, d, s in SPEC)
    assert 0 < info.instance < 2 ** 63  # fixed64, drawn at start
    assert table.mass == table.size  # a fifo table's mass is its size


def insert(pb, stub, samples):
    """Inserts samples (bytes each) in requests of PER_REQUEST; returns the
    keys the server gave them, in order."""
    pb2 = pb[0]
    requests = []
    for i in range(0, len(samples), PER_REQUEST):
        part = samples[i:i + PER_REQUEST]
        req = pb2.InsertRequest(table=TABLE, count=len(part),
                                data=b"".join(part), id=len(requests) + 1)
        if not requests:  # the writer's belief, checked by the server
            req.spec.extend(pb2.Leaf(name=n, dtype=d, shape=s)
                            for n, d, s in SPEC)
        requests.append(req)
    keys = []
    acks = list(stub.Insert(iter(requests), timeout=RPC_TIMEOUT_S))
    assert [a.id for a in acks] == [r.id for r in requests]
    for ack, req in zip(acks, requests):
        assert ack.count == req.count
        # keys increase per table, contiguous within a request
        assert ack.first_key == (keys[-1] + 1 if keys else 1)
        keys.extend(range(ack.first_key, ack.first_key + ack.count))
    return keys


def test_insert_then_subscribe_stream(pb, stub):
    pb2 = pb[0]
    rng = random.Random(8)
    sample_bytes = sum(leaf_bytes(d, s) for _, d, s in SPEC)
    samples = [rng.randbytes(sample_bytes) for _ in range(SAMPLES)]
    by_key = dict(zip(insert(pb, stub, samples), samples))

    requests = queue.Queue()  # None half-closes the call
    requests.put(pb2.SubscribeRequest(open=pb2.Open(
        table=TABLE, batch_size=BATCH, slots=4, mode=pb2.MODE_STREAM,
        prefetch=2)))
    call = stub.Subscribe(iter(requests.get, None), timeout=RPC_TIMEOUT_S)
    try:
        first = next(call)
        assert first.WhichOneof("kind") == "opened"
        assert first.opened.mode == pb2.MODE_STREAM
        layout = first.opened.layout
        assert (layout.slots, layout.batch_size) == (4, BATCH)
        assert spec_tuples(layout.spec) == SPEC
        assert len(layout.leaf_offset) == len(SPEC)
        # The Layout states the record size: no guessing from send_bytes.
        assert layout.info_record_bytes >= SAMPLE_INFO.size
        assert layout.send_bytes == (layout.info_offset +
                                     BATCH * layout.info_record_bytes)

        got_keys, seqs, released = [], [], []
        batch, chunks = bytearray(), 0
        for resp in call:
            assert resp.WhichOneof("kind") == "chunk", resp
            c = resp.chunk
            if c.offset == 0:
                seqs.append(c.seq)
            assert c.seq == seqs[-1], "a batch's chunks are not interleaved"
            assert c.offset == len(batch), "chunks of a batch arrive in order"
            assert c.total == layout.send_bytes
            # chimed keeps each message under gRPC's 1 MiB write target.
            assert resp.ByteSize() < 1 << 20, resp.ByteSize()
            batch += c.data
            chunks += 1
            if c.offset + len(c.data) < c.total:
                continue
            assert chunks > 1, "a batch this size comes in several chunks"
            got_keys += check_batch(layout, batch, by_key)
            batch, chunks = bytearray(), 0
            # Release two batches per Credit, as prefetch=2 allows.
            released.append(c.seq)
            if len(released) == 2 or len(got_keys) == SAMPLES:
                requests.put(pb2.SubscribeRequest(credit=pb2.Credit(
                    batches=len(released), released=released)))
                released = []
            if len(got_keys) == SAMPLES:
                requests.put(None)  # stream mode: half-close ends the call
        assert call.code() == grpc.StatusCode.OK
    finally:
        requests.put(None)
        call.cancel()
    # fifo: every item exactly once, oldest first
    assert got_keys == sorted(by_key)
    assert len(set(seqs)) == SAMPLES // BATCH

    stats = stub.Stats(pb2.StatsRequest(), timeout=RPC_TIMEOUT_S)
    (table,) = [t for t in stats.tables if t.name == TABLE]
    assert (table.inserts, table.size, table.returned) == (SAMPLES, 0, 0)


def check_batch(layout, batch, by_key):
    """Checks every byte of every sample of one reassembled batch against
    what was inserted under its key; returns the keys in batch order."""
    sizes = [leaf_bytes(leaf.dtype, leaf.shape) for leaf in layout.spec]
    keys = []
    for j in range(layout.batch_size):
        key, probability, times_sampled, _, insert_time_ns, priority, \
            table_size, episode_id, first_step, length = \
            SAMPLE_INFO.unpack_from(
                batch, layout.info_offset + j * layout.info_record_bytes)
        assert key in by_key
        assert (probability, times_sampled, priority) == (1.0, 1, 1.0)
        assert table_size >= 1
        assert (episode_id, first_step, length) == (0, 0, 0)
        assert insert_time_ns > 0
        sample, pos = by_key[key], 0
        for offset, size in zip(layout.leaf_offset, sizes):
            start = offset + j * size  # leaf-major: [batch_size, *shape]
            assert batch[start:start + size] == sample[pos:pos + size], \
                f"key {key}, leaf at sample offset {pos}"
            pos += size
        keys.append(key)
    return keys


def test_unknown_table_is_not_found(pb, stub):
    pb2 = pb[0]
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Insert(iter([pb2.InsertRequest(table="nope", count=1,
                                                   data=b"\0")]),
                         timeout=RPC_TIMEOUT_S))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert e.value.details() == "table 'nope' not found"

    with pytest.raises(grpc.RpcError) as e:
        list(stub.Subscribe(iter([pb2.SubscribeRequest(open=pb2.Open(
            table="nope", batch_size=1, slots=2, mode=pb2.MODE_STREAM))]),
            timeout=RPC_TIMEOUT_S))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert e.value.details() == "table 'nope' not found"
