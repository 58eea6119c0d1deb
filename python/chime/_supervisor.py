"""The supervisor of a chimed started by chime.ensure_server (see
chime/_server.py). Run as a script, not imported: it must not load the
extension (gRPC) and needs nothing but the standard library.

    _supervisor.py --name N --state PATH --log PATH --lock-fd FD
                   --owner-fd FD --owner-kind pidfd|pipe --owner-pid PID
                   --stop-timeout S -- CHIMED ARGS...

It runs in a session of its own (so the job's Ctrl-C reaches the owner,
not it), with the election lock's descriptor, which it hands on to chimed
too: the lock is free only once both are gone. It starts chimed, writes the
state file once chimed says "listening on", then waits for one of: the
owner gone (its pidfd readable, or EOF on the owner's pipe), SIGTERM /
SIGINT / SIGHUP to itself, or chimed's exit. Then it removes the state
file, stops chimed (SIGTERM, SIGKILL after --stop-timeout) and exits with
chimed's status (0: a clean stop). chimed gets SIGTERM too if this
process is killed (PR_SET_PDEATHSIG).
"""
import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time


def note(msg):
    sys.stderr.write(f"chime supervisor {os.getpid()}: {msg}\n")
    sys.stderr.flush()


def pdeathsig(parent):
    """preexec_fn for chimed: SIGTERM when this supervisor dies. Run in the
    forked child before exec; the supervisor has no other thread."""
    def set_it():
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except Exception:  # noqa: BLE001 - best effort, the pidfd still works
            pass
        if os.getppid() != parent:  # died before prctl took effect
            os._exit(1)
    return set_it


def read_address(log_path, offset):
    """The address of chimed's 'listening on ADDR' line, if written yet."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("listening on "):
            return line[len("listening on "):].strip()
    return None


def write_state(path, st):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(st, f)
    os.replace(tmp, path)


def remove_state(path, me):
    """Removes the state file if it is still this supervisor's."""
    try:
        with open(path) as f:
            if json.load(f).get("supervisor_pid") != me:
                return
        os.unlink(path)
    except (OSError, ValueError, AttributeError):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--lock-fd", type=int, required=True)
    ap.add_argument("--owner-fd", type=int, required=True)
    ap.add_argument("--owner-kind", choices=("pidfd", "pipe"), required=True)
    ap.add_argument("--owner-pid", type=int, required=True)
    ap.add_argument("--stop-timeout", type=float, default=30.0)
    ap.add_argument("chimed", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.chimed[1:] if a.chimed[:1] == ["--"] else a.chimed
    if not argv:
        note("no chimed command")
        return 2
    me = os.getpid()

    # Signals end the wait below through this pipe (set_wakeup_fd).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: stop.append(s))

    poller = select.poll()
    poller.register(a.owner_fd, select.POLLIN)
    poller.register(wake_r, select.POLLIN)

    def owner_gone():
        # pidfd: readable once the process exited; pipe: EOF (or error)
        # once every holder of its write end is gone.
        for fd, ev in poller.poll(0):
            if fd == a.owner_fd and ev:
                return True
        return False

    log_offset = 0  # the owner truncated the log for this run
    note(f"starting {' '.join(argv)} for owner {a.owner_pid}")
    chimed = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=sys.stdout, stderr=sys.stderr,
        pass_fds=(a.lock_fd,), preexec_fn=pdeathsig(me))
    # a.lock_fd stays open here: the lock is free only when this process
    # has cleaned up and chimed has exited.
    try:  # wakes the wait below as soon as chimed exits
        poller.register(os.pidfd_open(chimed.pid), select.POLLIN)
    except (AttributeError, OSError):
        pass  # checked every second instead
    ready = False
    why = None
    while True:
        if chimed.poll() is not None:
            why = f"chimed exited with {chimed.returncode}"
            break
        if stop:
            why = f"signal {stop[0]}"
            break
        if owner_gone():
            why = f"owner {a.owner_pid} is gone"
            break
        if not ready:
            addr = read_address(a.log, log_offset)
            if addr is not None:
                write_state(a.state, {
                    "name": a.name, "address": addr,
                    "chimed_pid": chimed.pid, "supervisor_pid": me,
                    "owner_pid": a.owner_pid, "log": a.log,
                    "started_unix": time.time()})
                ready = True
                note(f"chimed {chimed.pid} listening on {addr}")
        # Poll briefly until chimed listens, then wait on the owner,
        # chimed and signals.
        for fd, _ in poller.poll(50 if not ready else 1000):
            if fd == wake_r:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
    remove_state(a.state, me)
    note(f"stopping chimed {chimed.pid}: {why}")
    if chimed.poll() is None:
        chimed.send_signal(signal.SIGTERM)
        try:
            chimed.wait(timeout=a.stop_timeout)
        except subprocess.TimeoutExpired:
            note(f"chimed ignored SIGTERM for {a.stop_timeout} s: SIGKILL")
            chimed.kill()
            chimed.wait()
    rc = chimed.returncode
    note(f"chimed {chimed.pid} exited with {rc}")
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
