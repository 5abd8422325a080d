"""Loopback plumbing for the local Kafka cluster: ports a JVM binds later, and a TCP relay that a
test can cut (the link between one Kafka broker and one controller).

Forwarding is two threads per connection doing blocking reads (a handful of connections, and
nothing to tune). While cut, the relay keeps every connection open and answers nothing: new
connections are accepted and held, bytes on existing ones are read and dropped. That is a
blackhole, not a refusal, so the broker sees its requests time out exactly as on a partitioned
network, not a closed port it would report at once.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

LOOPBACK = "127.0.0.1"


class Relay:
    """Listens on a free loopback port and forwards each connection to ``target``."""

    def __init__(self, target: tuple[str, int], name: str = "relay"):
        self.target = target
        self.name = name
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False
        self._conns: set[socket.socket] = set()  # every open socket, both sides
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, name=f"{name}-accept", daemon=True).start()

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self, drop_connections: bool = False) -> None:
        """Stop forwarding; hold new and existing connections silently. With drop_connections the
        existing ones are closed instead, so that peers must connect again, into the silence."""
        with self._lock:
            self._cut = True
            conns = set(self._conns) if drop_connections else set()
            self._conns -= conns
        for conn in conns:
            _close(conn)

    def heal(self) -> None:
        """Drop every connection (held ones included) and forward new ones again: the peer
        reconnects, as it would once a partition ends and its stale connections time out."""
        with self._lock:
            self._cut = False
            conns, self._conns = self._conns, set()
        for conn in conns:
            _close(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, set()
        # shutdown() wakes the thread blocked in accept(); close() alone does not on Linux
        _close(self._listener)
        for conn in conns:
            _close(conn)

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    _close(client)
                    return
                self._conns.add(client)
                held = self._cut
            if held:
                self._start_pump(client, None)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                # the target is down: the client sees its connection closed, as it would directly
                self._forget(client)
                continue
            with self._lock:
                self._conns.add(upstream)
            self._start_pump(client, upstream)
            self._start_pump(upstream, client)

    def _start_pump(self, src: socket.socket, dst: socket.socket | None) -> None:
        threading.Thread(target=self._pump, args=(src, dst), name=f"{self.name}-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket | None) -> None:
        """Copy src to dst until either side closes; while cut (or without dst), read and drop."""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if dst is not None and not self._cut:
                    dst.sendall(data)
        except OSError:
            pass
        self._forget(src)
        if dst is not None and not self._cut:
            self._forget(dst)  # a closed side closes the pair, unless the link is cut

    def _forget(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.discard(conn)
        _close(conn)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


_taken: set[int] = set()  # ports handed out by this process, bound or not yet


def free_port() -> int:
    """A free loopback port below the ephemeral range: a JVM binds it seconds later, and by then an
    outgoing connection may have taken a port from bind(0) (seen: "Address already in use")."""
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(ephemeral // 2, ephemeral)
        try:
            socket.create_server((LOOPBACK, port)).close()
        except OSError:
            continue
        if port not in _taken:
            _taken.add(port)
            return port
