"""A writer or a learner on one side of a chime-link (test_link.py runs it
with `ip netns exec`). Prints its progress and, at the end, one JSON line.

  link_peer.py writer ADDR START COUNT   ids START.. into table q
  link_peer.py learner ADDR STOPFILE     reads q until STOPFILE exists and
                                         nothing came for 1.5 s
"""
import json
import os
import sys
import time

import numpy as np

import chime

PAD = np.zeros(1024, np.uint8)


def writer(addr, start, count):
    with chime.Client(addr, timeout=60.0) as c:
        # a 10 s outage may outlast a writer's default 10 s to reconnect
        w = c.writer("q", timeout=60.0, reconnect_timeout=30.0)
        gap_ends = []  # when a flush came back after 1 s or more
        for i in range(start, start + count, 100):
            w.extend({"id": np.arange(i, min(i + 100, start + count),
                                      dtype=np.uint64),
                      "pad": np.zeros((min(100, start + count - i), 1024),
                                      np.uint8)})
            t0 = time.time()
            w.flush()
            now = time.time()
            if now - t0 > 1.0:
                gap_ends.append(now)
            print(f"acked {w.acked}", flush=True)
            time.sleep(0.005)  # an actor's pace, so writing spans the outage
        w.close()
        print(json.dumps({"acked": w.acked, "gap_ends": gap_ends,
                          "stalls": w.stalls}),
              flush=True)


def learner(addr, stopfile):
    ids, timeouts, errors = [], 0, []
    idle = 0
    last, gap_ends = None, []  # when a batch came after 1 s without
    with chime.Client(addr, timeout=60.0) as c:
        s = c.stream("q", batch_size=8, mode="stream", open_timeout=60.0)
        print("open", flush=True)
        while True:
            try:
                with s.next(timeout=0.5) as b:
                    ids.extend(int(x) for x in b["id"])
                now = time.time()
                if last is not None and now - last > 1.0:
                    gap_ends.append(now)
                last = now
                idle = 0
            except chime.TimeoutError:
                timeouts += 1
                idle += 1
                if idle >= 3 and os.path.exists(stopfile):
                    break
            except chime.Error as e:
                errors.append(f"{type(e).__name__}: {e}")
                break
        st = s.stats()
        s.close()
    print(json.dumps({"ids": ids, "timeouts": timeouts, "errors": errors,
                      "gap_ends": gap_ends, "resumes": st["resumes"],
                      "resumes_late": st["resumes_late"]}), flush=True)


if __name__ == "__main__":
    role, addr = sys.argv[1], sys.argv[2]
    if role == "writer":
        writer(addr, int(sys.argv[3]), int(sys.argv[4]))
    else:
        learner(addr, sys.argv[3])
