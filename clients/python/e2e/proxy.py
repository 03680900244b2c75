"""A loopback TCP proxy that cuts connections: a dropped stream, on demand."""

from __future__ import annotations

import socket
import struct
import threading
from typing import List, Optional, Tuple


class CutProxy:
    """Forwards 127.0.0.1:<port> to target.

    With after set, the first `cuts` connections are closed after `after`
    bytes from the server, the ones after that are left alone; :meth:`drop`
    cuts every connection carried at the moment, at any time.
    """

    def __init__(self, target: Tuple[str, int], after: Optional[int] = None, cuts: int = 1) -> None:
        self.target, self.after, self.cuts = target, after, cuts
        self.connections = 0
        self.cut = 0  # connections cut so far
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self._links: List[Tuple[socket.socket, socket.socket]] = []  # (client, server) carried now
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

    def drop(self) -> int:
        """Cuts every connection carried now, abruptly (a TCP reset both ways), as a dropped network
        would; the proxy keeps listening, so a reconnect goes through. Returns how many it cut."""
        with self._lock:
            links, self._links = self._links, []
            self.cut += len(links)
        for client, server in links:
            for s in (client, server):
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            _close(client)
            _close(server)
        return len(links)

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
                limit = self.after if self.after is not None and self.connections <= self.cuts else -1
                self._socks += [client, server]
                self._links.append((client, server))
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
        with self._lock:
            self._links = [link for link in self._links if src not in link]
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
