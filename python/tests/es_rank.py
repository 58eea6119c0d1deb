"""One rank of a job for test_ensure_server.py, run as its own process:

    es_rank.py '{"name": ..., "run_dir": ..., "mode": ..., "config": ...,
                 "append": N, "timeout": S}'

Calls chime.ensure_server, appends N samples {"x": pid} to table "t",
prints one JSON line ({"pid", "owner", "address", "chimed_pid"} or
{"error", "message"}), then waits until stdin closes and exits normally.
"""
import json
import os
import sys

import chime


def main():
    a = json.loads(sys.argv[1])
    kw = {k: a[k] for k in ("config", "mode", "run_dir", "timeout", "chimed")
          if k in a}
    try:
        c = chime.ensure_server(a["name"], **kw)
        if a.get("append"):
            with c.writer("t") as w:
                for _ in range(a["append"]):
                    w.append({"x": os.getpid()})
        st = chime.server_state(a["name"], run_dir=a["run_dir"])
    except chime.Error as e:
        print(json.dumps({"error": type(e).__name__, "name": e.name,
                          "message": str(e)}), flush=True)
        return 3
    print(json.dumps({"pid": os.getpid(),
                      "owner": st["owner_pid"] == os.getpid(),
                      "address": st["address"],
                      "chimed_pid": st["chimed_pid"],
                      "supervisor_pid": st["supervisor_pid"]}), flush=True)
    sys.stdin.read()  # until the test closes it (or a signal)
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
