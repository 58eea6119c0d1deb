"""Remote learners across an emulated link that drops (issue 35, part 3;
docs/remote.md): chime-link puts chimed on one side of a 10 ms link and
writers and learners on the other; the link goes down for 5 s (the TCP
connections survive it) or 10 s (they do not: each stream opens its call
again by itself, docs/remote.md "A link that drops") under 8 learners of a
fifo table and comes back. Prints how long after the link came back each
learner had its next batch. Needs root, iproute2 and /dev/net/tun (network
namespaces): skipped without them."""
import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_chimed

HERE = pathlib.Path(__file__).resolve().parent
BUILD = pathlib.Path(os.environ.get(
    "CHIMED", ROOT / "build" / "src" / "server" / "chimed")).parents[2]
LINK = BUILD / "bench" / "chime-link"
LEARNERS = 8
WRITERS = 2
PER_WRITER = 20000
RUN_TIMEOUT_S = 180


def _why_not():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    if not os.path.exists("/dev/net/tun"):
        return "needs /dev/net/tun"
    if not os.access(LINK, os.X_OK):
        return f"{LINK} is not built"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None,
                                reason=_why_not() or "")


@contextlib.contextmanager
def link(name, *args):
    """A chime-link NAME running; yields its process (SIGUSR1: down,
    SIGUSR2: up). Its namespaces are gone after, and proc.down_dropped
    is how many packets it dropped while down."""
    proc = subprocess.Popen([str(LINK), name, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("ready"):
            proc.wait(timeout=10)
            pytest.skip(f"chime-link cannot make its namespaces here: "
                        f"{proc.stderr.read().strip()}")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        report = proc.stderr.read()
        proc.down_dropped = sum(int(m) for m in re.findall(r"down (\d+),",
                                                           report))
        left = subprocess.run(["ip", "netns", "list"], capture_output=True,
                              text=True).stdout
        assert f"{name}-s" not in left and f"{name}-l" not in left


def cpu_s(pid):
    """utime + stime of a process, seconds."""
    f = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def peer(ns, *args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable,
                             str(HERE / "link_peer.py"), *args],
                            stdout=subprocess.PIPE, text=True, env=env)


def last_json(proc):
    out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, out[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("down_s", [5.0, 10.0])
def test_link_down_under_8_learners(tmp_path, down_s):
    """Every acked item reaches exactly one learner across a 5 s or a 10 s
    outage: none lost, none twice; the learners see TimeoutError while the
    link is down (never a hang, never an error), and no process spins
    meanwhile (CPU time over the outage, which a busy machine only
    lowers). After 10 s the learners' connections are gone (gRPC's
    keepalive gives them 10 s: TCP_USER_TIMEOUT) and their streams resume
    on new ones; chimed keeps its side of each old stream (parked for 5 s
    once it sees the call die) until the resuming Open releases what the
    learner received, so none repeats."""
    name = f"chtl{os.getpid() % 100000}"
    table = {"name": "q", "spec": "id:u64[], pad:u8[1024]",
             "capacity": 100000, "sampler": "fifo", "remover": "fifo",
             "max_times_sampled": 1, "min_size": 1}
    stop = tmp_path / "stop"
    with link(name, "--rtt-ms", "10") as lk, \
            run_chimed(tmp_path, tables=[table],
                       listen="10.237.0.1:0",
                       prefix=["ip", "netns", "exec", f"{name}-s"]) as (
                proc, addr):
        learners = [peer(f"{name}-l", "learner", addr, str(stop))
                    for _ in range(LEARNERS)]
        for p in learners:
            assert p.stdout.readline().strip() == "open"
        writers = [peer(f"{name}-l", "writer", addr, str(k * PER_WRITER),
                        str(PER_WRITER)) for k in range(WRITERS)]
        # down once the first writer is well into its work
        for line in writers[0].stdout:
            if int(line.split()[1]) >= PER_WRITER // 4:
                break
        procs = [proc] + learners + writers
        before = [cpu_s(p.pid) for p in procs]
        lk.send_signal(10)  # SIGUSR1: down
        time.sleep(down_s)  # the outage itself
        during = [cpu_s(p.pid) - b for p, b in zip(procs, before)]
        lk.send_signal(12)  # SIGUSR2: up
        up = time.time()
        wrote = [last_json(w) for w in writers]
        acked = [r["acked"] for r in wrote]
        stop.touch()
        got = [last_json(p) for p in learners]
        # what no learner took is still in the table: drain it
        rest = peer(f"{name}-l", "learner", addr, str(stop))
        assert rest.stdout.readline().strip() == "open"
        got.append(last_json(rest))
    # each learner's first batch after a wait of 1 s or more that ended
    # once the link was back (a learner may get none: others drained it)
    back = sorted(min(t - up for t in g["gap_ends"] if t >= up)
                  for g in got[:LEARNERS] if any(t >= up for t in g["gap_ends"]))
    ids = [i for g in got for i in g["ids"]]
    back = back or [float("nan")]
    print(f"\nlink down {down_s} s: {len(back)} learners' next batch "
          f"{back[0]:.2f} .. {back[-1]:.2f} s after it came back (median "
          f"{back[len(back) // 2]:.2f}); resumes "
          f"{[g['resumes'] for g in got[:LEARNERS]]}, late "
          f"{[g['resumes_late'] for g in got[:LEARNERS]]}; "
          f"{len(ids) - len(set(ids))} items twice; writers' first ack "
          f"after it came back: "
          f"{[round(min(t - up for t in r['gap_ends'] if t >= up), 2) for r in wrote if any(t >= up for t in r['gap_ends'])]} s; "
          f"writers' stalls {[r['stalls'] for r in wrote]}")
    assert lk.down_dropped > 0, "nothing crossed the link while it was down"
    assert acked == [PER_WRITER] * WRITERS
    for g in got:
        assert g["errors"] == []
    for g in got[:LEARNERS]:
        assert g["timeouts"] >= 1
    assert len(ids) == len(set(ids)), "an item reached learners twice"
    assert set(ids) == set(range(WRITERS * PER_WRITER)), "items lost"
    assert max(during) < 1.0, f"CPU seconds over the {down_s} s outage: {during}"
