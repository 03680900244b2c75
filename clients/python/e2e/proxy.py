"""A loopback TCP proxy that cuts its first connections after some bytes: a dropped stream, on demand."""

from __future__ import annotations

import socket
import threading
from typing import List, Tuple


class CutProxy:
    """Forwards 127.0.0.1:<port> to target; the first `cuts` connections are closed after
    `after` bytes from the server, the ones after that are left alone."""

    def __init__(self, target: Tuple[str, int], after: int, cuts: int = 1) -> None:
        self.target, self.after, self.cuts = target, after, cuts
        self.connections = 0
        self.cut = 0  # connections cut so far
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stops listening and closes every connection."""
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)

    def __enter__(self) -> "CutProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self.connections += 1
                limit = self.after if self.connections <= self.cuts else -1
                self._socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server, -1), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, limit), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, limit: int) -> None:
        """Copies src to dst; with limit ≥ 0, closes both once limit bytes went through."""
        sent = 0
        try:
            while True:
                data = src.recv(4096)
                if not data:
                    break
                if 0 <= limit < sent + len(data):
                    dst.sendall(data[: limit - sent])
                    with self._lock:
                        self.cut += 1
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
