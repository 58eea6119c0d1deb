"""A writer the server forgot (docs/protocol.md, "Which writers the server
remembers") raises chime.WriterForgottenError, not InvalidArgumentError:
its connection is cut (a loopback proxy the test owns), another writer
takes its place in a table that remembers one writer and keeps none once
no call carries it, and its next request is refused by the server."""
import socket
import threading
import time

import pytest

import chime
import conftest


class Proxy:
    """Forwards 127.0.0.1:<port> to a target port; cut() closes every
    connection, whatever is in flight."""

    def __init__(self, target_port):
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.socks = []
        self.quit = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.quit:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                continue
            s = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.socks += [c, s]
            for a, b in ((c, s), (s, c)):
                t = threading.Thread(target=self._pipe, args=(a, b),
                                     daemon=True)
                t.start()
                self.threads.append(t)

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.quit = True
        self.cut()
        for t in self.threads:
            t.join(timeout=5)
        self.lsock.close()


def test_error_class():
    with pytest.raises(chime.WriterForgottenError) as e:
        chime._chime._raise(-20, "writer 77 is no longer remembered")
    assert isinstance(e.value, chime.Error)
    assert not isinstance(e.value, chime.InvalidArgumentError)
    assert e.value.code == -20 and e.value.name == "CHIME_EFORGOTTEN"


def test_forgotten_writer_raises(tmp_path):
    tables = [{"name": "tiny", "spec": "x:u64[]", "capacity": 100,
               "sampler": "uniform", "max_writers": 1, "writer_idle_ms": 0}]
    with conftest.run_chimed(tmp_path, tables=tables) as (proc, addr):
        proxy = Proxy(int(addr.rsplit(":", 1)[1]))
        try:
            with chime.Client(f"127.0.0.1:{proxy.port}") as cw, \
                    chime.Client(addr) as c:
                w = cw.writer("tiny")
                w.append({"x": 1})
                w.flush()
                proxy.cut()
                # Another writer takes the one place once the server saw
                # w's call end (until then w is bound and it is refused).
                deadline = time.monotonic() + 20
                while True:
                    f = c.writer("tiny")
                    f.append({"x": 2})
                    try:
                        f.close()
                        break
                    except chime.Error as e:
                        assert e.name == "CHIME_ERESOURCE", str(e)
                        assert "not taken" in str(e)
                        assert time.monotonic() < deadline
                        time.sleep(0.01)
                w.append({"x": 3})
                with pytest.raises(chime.WriterForgottenError) as e:
                    w.flush()
                assert e.value.acked == 1 and e.value.taken == 2
                assert "no longer remembered" in str(e.value)
                assert "new writer" in str(e.value)
                with pytest.raises(chime.WriterForgottenError):
                    w.close()
        finally:
            proxy.close()
        assert proc.poll() is None
