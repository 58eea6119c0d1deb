"""One chimed per node, started by whichever rank comes first.

Every rank of a job runs the same `chime.ensure_server(name, config=...)`.
A file lock in a node-local directory elects one owner; the owner starts
chimed under a small supervisor (chime/_supervisor.py, its own session, so a
Ctrl-C meant for the job does not reach it) and the others wait until the
server listens, then connect. The supervisor watches the owner through a
pidfd and stops chimed when the owner is gone, however it went (normal exit,
SIGINT, SIGTERM, SIGKILL).

Files in the run directory, all named after the server:

  NAME.lock         the election: flock(LOCK_EX) held by the supervisor and
                    chimed (the owner hands its descriptor over), so the
                    kernel frees it when both are gone, crash or not
  NAME.json         the state, written by the supervisor once chimed
                    listens and removed when it stops: address, pids
  NAME.log          chimed's output and the supervisor's notes
  NAME.sock         chimed's listening socket (unless `listen` says otherwise)
  NAME.config.json  the config, when it was given as a dict

A lock nobody holds is no lock: a crashed owner leaves files behind, never a
held lock, and a state file whose chimed is gone is ignored.
"""
import atexit
import errno
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from . import _chime

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_POLL_S = 0.05
# sun_path is 108 bytes with its terminating NUL.
_UNIX_PATH_MAX = 107

_owned = {}  # (run_dir, name) -> _Owned, servers this process started
_owned_lock = threading.Lock()


class _Owned:
    def __init__(self, name, run_dir, proc, stop_timeout):
        self.name = name
        self.run_dir = run_dir
        self.proc = proc  # the supervisor, our child
        self.stop_timeout = stop_timeout
        self.pid = os.getpid()  # a forked child inherits this, not the role


def _default_run_dir():
    env = os.environ.get("CHIME_RUN_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.access(xdg, os.W_OK):
        return os.path.join(xdg, "chime")
    return f"/tmp/chime-{os.getuid()}"


def _prepare_run_dir(path):
    """Creates the directory (0700) and refuses one that another user owns
    or that is a symlink: the lock and state decide which server a rank
    trusts."""
    path = os.path.abspath(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        _chime_error(f"run_dir {path}: {e.strerror}", ESYS)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        _chime_error(f"run_dir {path} is not a directory", EINVAL)
    if st.st_uid != os.getuid():
        _chime_error(f"run_dir {path} belongs to uid {st.st_uid}, "
                     f"not to this user ({os.getuid()})", EINVAL)
    return path


class _Paths:
    def __init__(self, run_dir, name):
        base = os.path.join(run_dir, name)
        self.lock = base + ".lock"
        self.state = base + ".json"
        self.log = base + ".log"
        self.sock = base + ".sock"
        self.config = base + ".config.json"


# CHIME_E* codes, from the C library's one list (include/chime/errors.h).
EINVAL, ETIMEDOUT, ESYS = _chime.EINVAL, _chime.ETIMEDOUT, _chime.ESYS
ENOTFOUND, EUNAVAILABLE = _chime.ENOTFOUND, _chime.EUNAVAILABLE


def _chime_error(msg, code=EUNAVAILABLE):
    """Raises the chime.Error subclass of `code`, as the C calls do."""
    _chime._raise(code, msg)


def _find_chimed(chimed):
    """The chimed binary: the argument, else $CHIMED, else the chimed built
    with this package (its build tree), else `chimed` on PATH."""
    tried = []
    candidates = []
    if chimed is not None:
        candidates.append(("chimed=", os.fspath(chimed)))
    else:
        if os.environ.get("CHIMED"):
            candidates.append(("$CHIMED", os.environ["CHIMED"]))
        try:
            from . import _build
            if _build.CHIMED:
                candidates.append(("the build tree", _build.CHIMED))
        except ImportError:
            pass
        import shutil
        found = shutil.which("chimed")
        if found:
            candidates.append(("PATH", found))
    for where, path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
        tried.append(f"{path} ({where})")
        if where in ("chimed=", "$CHIMED"):
            break  # an explicit choice that does not work is an error
    _chime_error("chimed not found; tried: " +
                 (", ".join(tried) if tried else
                  "no chimed= argument, no $CHIMED, no build tree, "
                  "nothing on PATH"), ENOTFOUND)


def server_state(name, run_dir=None):
    """The state of server `name` as its supervisor wrote it once chimed
    listened: {"address", "chimed_pid", "supervisor_pid", "owner_pid",
    "log", ...}, or None when there is none. A state whose chimed is gone
    (a crash left it) is None too."""
    paths = _Paths(os.path.abspath(run_dir or _default_run_dir()), name)
    return _read_state(paths)


def _read_state(paths):
    try:
        with open(paths.state) as f:
            st = json.load(f)
        pid = int(st["chimed_pid"])
        str(st["address"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(pid):
        return None
    return st


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _connect(st, client_timeout):
    """A Client on the state's address, or None if it does not answer."""
    try:
        # None: the Client's own default (the C library's)
        kw = {} if client_timeout is None else {"timeout": client_timeout}
        c = _chime.Client(st["address"], **kw)
    except _chime.Error:
        return None
    try:
        c.info()
    except _chime.Error:
        c.close()
        return None
    return c


def _try_lock(paths):
    """The lock file's descriptor with the lock held, or None when another
    process holds it."""
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def _log_tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _owner_watch_fds():
    """A descriptor the supervisor can poll to learn this process is gone:
    a pidfd of this process (readable when it exits, whatever killed it),
    or, on kernels without pidfd_open, the read end of a pipe whose write
    end only this process holds (EOF when it exits; a child forked later
    inherits the write end and delays that EOF, pidfd has no such gap).
    Returns (fd to pass, fd to keep or None, kind)."""
    if hasattr(os, "pidfd_open"):
        try:
            return os.pidfd_open(os.getpid()), None, "pidfd"
        except OSError:
            pass
    r, w = os.pipe()  # both O_CLOEXEC
    return r, w, "pipe"


def _start(paths, name, config, chimed, listen, stop_timeout, extra_args,
           lock_fd):
    """This process won the election (lock_fd holds the lock): starts the
    supervisor and returns it. The lock goes with it."""
    try:
        argv = _chimed_argv(paths, config, chimed, listen, extra_args)
    except BaseException:
        os.close(lock_fd)  # lets the next rank try
        raise
    try:
        os.unlink(paths.state)  # a crashed run's
    except FileNotFoundError:
        pass
    watch_fd, keep_fd, kind = _owner_watch_fds()
    supervisor = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "_supervisor.py")
    sup_argv = [sys.executable, "-s", supervisor,
                "--name", name, "--state", paths.state, "--log", paths.log,
                "--lock-fd", str(lock_fd), "--owner-fd", str(watch_fd),
                "--owner-kind", kind, "--owner-pid", str(os.getpid()),
                "--stop-timeout", str(stop_timeout), "--"] + argv
    try:
        with open(paths.log, "wb") as log:
            proc = subprocess.Popen(
                sup_argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(lock_fd, watch_fd), start_new_session=True,
                cwd="/")
    finally:
        os.close(watch_fd)
        os.close(lock_fd)  # the supervisor's copy holds the lock now
    if keep_fd is not None:
        # The write end stays open as long as this process lives; it is
        # close-on-exec, so programs this process runs do not keep it.
        _keep_fds.append(keep_fd)
    owned = _Owned(name, os.path.dirname(paths.lock), proc, stop_timeout)
    with _owned_lock:
        _owned[(owned.run_dir, name)] = owned
    return owned


def _chimed_argv(paths, config, chimed, listen, extra_args):
    argv = [_find_chimed(chimed)]
    if config is not None:
        if isinstance(config, dict):
            tmp = paths.config + f".{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(config, f, indent=1)
            os.replace(tmp, paths.config)
            argv += ["--config", paths.config]
        else:
            argv += ["--config", os.path.abspath(os.fspath(config))]
    if listen is None and isinstance(config, dict) and config.get("listen"):
        listen = config["listen"]
    if listen is None:
        if len(paths.sock) > _UNIX_PATH_MAX:
            _chime_error(f"socket path {paths.sock} is longer than "
                         f"{_UNIX_PATH_MAX} bytes: pass a shorter run_dir "
                         f"or listen=", EINVAL)
        listen = "unix:" + paths.sock
    return argv + ["--listen", listen] + [str(a) for a in extra_args]


_keep_fds = []


def ensure_server(name, config=None, mode="auto", *, chimed=None,
                  listen=None, run_dir=None, timeout=60.0,
                  client_timeout=None, stop_timeout=30.0, chimed_args=()):
    """Returns a chime.Client connected to the node's chimed named `name`,
    started by whichever rank gets there first.

    mode: "auto" connects to a live server of that name if there is one,
    else runs the election; "spawn" runs the election straight away; in
    both, the winner starts chimed under a supervisor that stops it when
    the winner's process exits (normally, SIGINT, SIGTERM or SIGKILL), and
    the others wait until it listens. "attach" never starts one: it waits
    until one of that name answers.

    config: a dict (written to NAME.config.json) or the path of a chimed
    JSON config. chimed: the binary (else $CHIMED, else the chimed of this
    package's build tree, else PATH). listen: the address chimed listens
    on, default unix:RUN_DIR/NAME.sock (the config's "listen" when the
    config is a dict that has one). run_dir: node-local directory of the
    lock, state, log and socket; default $CHIME_RUN_DIR, else
    $XDG_RUNTIME_DIR/chime, else /tmp/chime-UID. timeout: seconds to wait
    for a server to listen (chime.TimeoutError). client_timeout: the
    Client's timeout for unary calls (None: the Client's default). stop_timeout: how long the supervisor
    waits for chimed's graceful stop before SIGKILL.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        _chime_error(f"server name {name!r}: letters, digits, '_', '.', '-' "
                     f"(64 at most)", EINVAL)
    if mode not in ("auto", "attach", "spawn"):
        _chime_error(f"mode {mode!r}: expected 'auto', 'attach' or 'spawn'",
                     EINVAL)
    run_dir = _prepare_run_dir(run_dir or _default_run_dir())
    paths = _Paths(run_dir, name)
    deadline = time.monotonic() + timeout
    owned = None
    probe = mode != "spawn"
    while True:
        if probe:
            st = _read_state(paths)
            if st is not None:
                c = _connect(st, client_timeout)
                if c is not None:
                    return c
        if mode != "attach" and owned is None:
            fd = _try_lock(paths)
            if fd is not None:
                owned = _start(paths, name, config, chimed, listen,
                               stop_timeout, chimed_args, fd)
            probe = True  # from now on wait for whoever won
        if owned is not None and owned.proc.poll() is not None:
            with _owned_lock:
                _owned.pop((owned.run_dir, name), None)
            _chime_error(
                f"chimed for '{name}' did not start (supervisor exited with "
                f"{owned.proc.returncode}); {paths.log}:\n"
                f"{_log_tail(paths.log)}")
        if time.monotonic() >= deadline:
            what = ("no server" if mode == "attach"
                    else "the server did not listen")
            if owned is not None:  # ours: stop it rather than leave it
                with _owned_lock:
                    _owned.pop((owned.run_dir, name), None)
                _stop(owned)
            _chime_error(f"ensure_server('{name}', mode='{mode}'): {what} "
                         f"within {timeout} s (run_dir {run_dir})",
                         ETIMEDOUT)
        time.sleep(_POLL_S)


def stop_server(name, run_dir=None, timeout=None):
    """Stops the server `name` that this process started with ensure_server
    (what its exit would do) and waits for it; returns chimed's exit status
    as the supervisor reports it (0: a clean stop). Raises chime.Error when
    this process does not own it."""
    run_dir = os.path.abspath(run_dir or _default_run_dir())
    with _owned_lock:
        owned = _owned.pop((run_dir, name), None)
    if owned is None or owned.pid != os.getpid():
        _chime_error(f"server '{name}' was not started by this process",
                     EINVAL)
    return _stop(owned, timeout)


def _stop(owned, timeout=None):
    proc = owned.proc
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        return proc.wait(timeout=timeout if timeout is not None
                         else owned.stop_timeout + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@atexit.register
def _stop_all():
    # A normal exit (and an uncaught KeyboardInterrupt) stops what this
    # process started and waits for it; any other death is the
    # supervisor's to notice.
    with _owned_lock:
        items = list(_owned.values())
        _owned.clear()
    for owned in items:
        if owned.pid != os.getpid():
            continue  # a fork of the owner exiting: not the owner
        try:
            _stop(owned)
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
