"""Device streams against the fake libcudart (a table of fixed leaves, then
one of ragged leaves: values on the device, offsets on the host), in a
process of its own (the CUDA runtime is loaded once per process):
test_device.py runs it as
`device_case.py TARGET FAKE_LIBCUDART MODE LOG` (TARGET one address or a
comma list of shards), with CHIME_CUDART set to
the fake and FAKE_CUDART_LOG to LOG. Exits non-zero with a message when a
check fails.

The fake's device memory is host memory, so once the fake ran the queued
work (fake_cudart_run) a leaf's bytes are read at the DLPack pointer."""
import ctypes
import sys

import numpy as np

import chime

addr, fake_path, mode, log_path = sys.argv[1:5]
shards = len(addr.split(","))  # a sharded target: a device sub-stream each
fake = ctypes.CDLL(fake_path)
fake.fake_cudart_run.restype = ctypes.c_long
fake.fake_cudart_run.argtypes = [ctypes.c_long]
fake.fake_cudart_count.restype = ctypes.c_long
fake.fake_cudart_count.argtypes = [ctypes.c_char_p]
fake.cudaStreamCreateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                           ctypes.c_uint]
fake.cudaStreamDestroy.argtypes = [ctypes.c_void_p]

get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
get_pointer.restype = ctypes.c_void_p
get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


def tensor(capsule):
    return DLTensor.from_address(get_pointer(capsule, b"dltensor"))


def log_lines(prefix):
    with open(log_path) as f:
        return [line for line in f if line.startswith(prefix)]


BATCH, DIM = 4, 16
c = chime.Client(addr)
w = c.writer("dev")
for i in range(256):
    w.append({"x": np.arange(DIM, dtype=np.float32) + i * DIM, "id": i})
w.close()

# A host stream is as it was: numpy arrays, CPU DLPack.
with c.stream("dev", BATCH, mode=mode, slots=4) as s:
    assert s.device is None
    b = s.next(timeout=10)
    assert isinstance(b["x"], np.ndarray)
    assert b["x"].__dlpack_device__() == (1, 0)
    assert b.view("x").device is None
    b.release()

ls = ctypes.c_void_p()
assert fake.cudaStreamCreateWithFlags(ctypes.byref(ls), 1) == 0
s = c.stream("dev", BATCH, mode=mode, slots=4, device="cuda:0", prefetch=2)
assert s.device == 0 and s.mode == mode
for n in range(40):
    b = s.next(timeout=10)
    x, ids = b["x"], b["id"]
    assert type(x).__name__ == "View" and x.device == 0
    assert x.shape == (BATCH, DIM) and ids.shape == (BATCH,)
    assert x.__dlpack_device__() == (2, 0)
    assert b.view("x").__dlpack_device__() == (2, 0)
    try:
        memoryview(x)
        raise AssertionError("a device leaf gave a host buffer")
    except BufferError:
        pass
    waits = len(log_lines("wait "))
    cap = x.__dlpack__(stream=ls.value)
    t = tensor(cap)
    assert (t.device_type, t.device_id, t.ndim) == (2, 0, 2)
    assert (t.code, t.bits, t.lanes) == (2, 32, 1)  # float32
    assert (t.shape[0], t.shape[1]) == (BATCH, DIM)
    assert t.data == x.ptr
    # The consumer's stream waits for the copy: one wait, on that stream.
    new = log_lines("wait ")[waits:]
    assert len(new) == 1 and new[0].startswith(f"wait {hex(ls.value)} "), new
    id_cap = ids.__dlpack__(stream=-1)  # no ordering asked: no wait
    assert len(log_lines("wait ")) == waits + 1
    fake.fake_cudart_run(-1)
    got = np.frombuffer(ctypes.string_at(t.data, BATCH * DIM * 4),
                        dtype=np.float32).reshape(BATCH, DIM)
    got_ids = np.frombuffer(ctypes.string_at(tensor(id_cap).data, BATCH * 8),
                            dtype=np.uint64)
    assert b.info.shape == (BATCH,)  # the records stay on the host
    for k in range(BATCH):
        want = np.arange(DIM, dtype=np.float32) + int(got_ids[k]) * DIM
        assert (got[k] == want).all(), (k, got[k], got_ids[k])
    del cap, id_cap, t, x, ids  # the views hold the batch
    records = len(log_lines("record "))
    b.release()
    # The release point is recorded on the stream that waited.
    new = log_lines("record ")[records:]
    assert any(line.rstrip().endswith(hex(ls.value)) for line in new), new

b = s.next(timeout=10)
b["x"].__dlpack__(stream=None)  # None: the legacy default stream
assert log_lines("wait ")[-1].startswith("wait 0x1 ")
try:
    b["x"].__dlpack__(stream=0)
    raise AssertionError("stream 0 was taken")
except ValueError:
    pass
b.release()
st = s.stats()
assert st["device_bytes"] > 0 and st["device_copies"] >= 41, st
assert 1 <= st["device_max_slots_held"] <= 2, st
s.close()

# Ragged leaves: b["tok"] is the batch's rows on the device ([total]),
# b.offsets("tok") a host array; sample i has i % 9 rows valued 100 i + r.
w = c.writer("rag")
for i in range(64):
    w.append({"tok": np.arange(i % 9, dtype=np.int32) + 100 * i, "id": i})
w.close()
s = c.stream("rag", BATCH, mode=mode, slots=4, device=0, prefetch=2)
for n in range(20):
    b = s.next(timeout=10)
    tok, offs = b["tok"], b.offsets("tok")
    assert type(tok).__name__ == "View" and tok.device == 0
    assert isinstance(offs, np.ndarray) and offs.shape == (BATCH + 1,)
    total = int(offs[-1])
    assert tok.shape == (total,)
    cap = tok.__dlpack__(stream=ls.value)
    assert tensor(cap).device_type == 2 and tensor(cap).shape[0] == total
    id_cap = b["id"].__dlpack__(stream=ls.value)
    fake.fake_cudart_run(-1)
    rows = np.frombuffer(ctypes.string_at(tensor(cap).data, total * 4),
                         dtype=np.int32)
    ids = np.frombuffer(ctypes.string_at(tensor(id_cap).data, BATCH * 8),
                        dtype=np.uint64)
    for k in range(BATCH):
        i = int(ids[k])
        assert offs[k + 1] - offs[k] == i % 9, (k, i, offs)
        want = np.arange(i % 9, dtype=np.int32) + 100 * i
        assert (rows[offs[k]:offs[k + 1]] == want).all(), (k, i, rows)
    try:
        b.samples("tok")
        raise AssertionError("samples() read a device batch")
    except chime.InvalidArgumentError as e:
        assert "host batches" in str(e)
    del cap, id_cap, tok, offs
    b.release()
s.close()
assert fake.cudaStreamDestroy(ls) == 0
for what in (b"malloc", b"stream", b"event", b"register"):
    assert fake.fake_cudart_count(what) == 0, what
# once per device stream (and shard), never per batch
assert len(log_lines("register ")) == 2 * shards
assert not log_lines("copy-src-changed")
c.close()
print("ok")
