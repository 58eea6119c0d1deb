"""`chimectl top` live, on a pseudo-terminal: it draws frames with the
terminal in raw mode (no echo, keys one at a time) and gives the terminal
back as it was whichever way it ends: q, Ctrl-C typed on the terminal, or
a signal from elsewhere (it then ends by that signal, as a shell expects).
The plain frames of --iterations are checked by tests/e2e/test_e2e_top.c."""
import os
import pathlib
import pty
import select
import signal
import subprocess
import termios
import time

import pytest

import conftest

DEADLINE_S = 20  # generous: a loaded machine, never a speed bound


def chimectl():
    chimed = pathlib.Path(os.environ.get(
        "CHIMED", conftest.ROOT / "build" / "src" / "server" / "chimed"))
    path = chimed.parents[2] / "examples" / "chimectl"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built")
    return str(path)


def read_until(fd, text, proc):
    """What the terminal showed until `text` appeared (bytes)."""
    seen = b""
    end = time.monotonic() + DEADLINE_S
    while text not in seen:
        assert time.monotonic() < end, f"no {text!r} in {seen[-2000:]!r}"
        assert proc.poll() is None, f"top ended ({proc.returncode}): {seen!r}"
        if select.select([fd], [], [], 0.1)[0]:
            seen += os.read(fd, 65536)
    return seen


def drain(fd):
    """What is left to read on the terminal (top has ended)."""
    out = b""
    while select.select([fd], [], [], 0)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: no process holds the other side now
            break
        if not chunk:
            break
        out += chunk
    return out


def cooked(attrs):
    lflag = attrs[3]
    return bool(lflag & termios.ICANON) and bool(lflag & termios.ECHO)


@pytest.fixture
def tty_top(chimed):
    """(process, master fd, slave fd): top live on a new terminal, its
    controlling one (setsid, then the slave opened by the child), so that
    Ctrl-C typed there is SIGINT."""
    master, slave = pty.openpty()
    name = os.ttyname(slave)
    assert cooked(termios.tcgetattr(slave))
    proc = subprocess.Popen(
        ["setsid", "sh", "-c", 'exec "$0" top "$1" <"$2" >"$2" 2>&1',
         chimectl(), chimed, name],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        yield proc, master, slave
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        os.close(slave)


def started(proc, master, slave):
    """Waits for the first frame, and checks the terminal is raw then."""
    shown = read_until(master, b"TABLE", proc)
    assert b"\x1b[?1049h" in shown  # the alternate screen
    assert not cooked(termios.tcgetattr(slave))
    return shown


def ended(proc, master, slave):
    """top's exit status, once the terminal is cooked again."""
    rc = proc.wait(timeout=DEADLINE_S)
    assert cooked(termios.tcgetattr(slave))
    return rc


def test_q_quits_and_restores(tty_top):
    proc, master, slave = tty_top
    started(proc, master, slave)
    os.write(master, b"q")
    assert ended(proc, master, slave) == 0
    assert b"\x1b[?1049l" in drain(master)  # the screen given back


def test_ctrl_c_restores(tty_top):
    proc, master, slave = tty_top
    started(proc, master, slave)
    os.write(master, b"\x03")  # the terminal's INTR: SIGINT to top
    assert ended(proc, master, slave) == -signal.SIGINT


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_restores(tty_top, sig):
    proc, master, slave = tty_top
    started(proc, master, slave)
    proc.send_signal(sig)
    assert ended(proc, master, slave) == -sig


def test_not_a_terminal_prints_plain_frames(chimed):
    """Without --iterations and a terminal: plain frames until a signal."""
    proc = subprocess.Popen([chimectl(), "top", chimed, "--interval-ms",
                             "100"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        shown = read_until(proc.stdout.fileno(), b"\n\nchimectl top", proc)
        assert b"\x1b[" not in shown
        assert b"TABLE" in shown
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE_S)
        proc.stdout.close()
