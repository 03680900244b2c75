"""A loopback TCP proxy that cuts connections: a dropped stream, on demand."""

from __future__ import annotations

import socket
import struct
import threading
from typing import List, Tuple


class CutProxy:
    """Forwards 127.0.0.1:<port> to target; :meth:`drop` cuts every connection carried at the
    moment (tests call it on a chosen event, so that the cut never races the stream's end)."""

    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
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
                self._socks += [client, server]
                self._links.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Copies src to dst until either side closes."""
        try:
            while True:
                data = src.recv(4096)
                if not data:
                    break
                dst.sendall(data)
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
