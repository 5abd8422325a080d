"""The engine hosts' starter: a process the Python worker daemon forks once it has imported the
job's modules (udfs.worker_daemon), which forks a state partition's engine host when a worker
asks for one.

Why: a host started as a new interpreter imports pandas, pyarrow and the project's modules
before it listens (~0.34 s of imports, ``python -X importtime``), while the task that asked waits,
in the job's first micro-batch with input, when every partition starts its host at once. Forked
from a process that has them imported, a host listens within milliseconds (0.36-0.41 s against
0.024-0.026 s from asking to a connection: bench/HISTORY.md, session 44).

Forked from the daemon before Spark's daemon code runs, the starter holds no Spark socket and
runs no Python thread (the daemon forks its workers from the same state); it leaves the
daemon's session and exits once the daemon is gone. It answers on a socket beside the hosts',
in the same folder of this user's alone, and forks hosts for that folder's addresses of its
daemon only. Where there is no starter (another daemon module, tests without Spark), or it does
not answer, streaming.spark.engine_host starts the host as a new interpreter, as before.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from pathlib import Path

ASK_TIMEOUT_S = 5
# What ps and top show for these processes: forked from the daemon, their command line would be its.
STARTER_TITLE = "epochwatch engine host starter, worker daemon {owner}"
HOST_TITLE = "epochwatch engine host, worker daemon {owner}: {address}"
_ACCEPT_TICK_S = 1.0   # how often the starter checks that its daemon is still there


def address_beside(host_address: str, owner: int) -> str:
    """The socket of the daemon ``owner``'s starter: beside its hosts' (``host_address`` one of
    them)."""
    return str(Path(host_address).with_name(f"{owner}-starter"))


def fork_for_daemon(owner: int) -> int:
    """In the worker daemon ``owner``: fork its starter; its pid."""
    from streaming.spark.engine_host import starter_address   # which imports this module

    return fork_starter(owner, starter_address(owner))


def fork_starter(owner: int, address: str) -> int:
    """In the daemon ``owner``: fork the starter listening on ``address``; its pid."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    Path(address).unlink(missing_ok=True)   # a dead daemon's, whose pid this one reuses
    listener.bind(address)
    listener.listen()
    try:
        pid = os.fork()
    except OSError:
        listener.close()   # or workers would wait for an answer on it
        Path(address).unlink(missing_ok=True)
        raise
    if pid:
        listener.close()
        return pid
    status = 1
    try:
        os.setsid()   # not in the daemon's process group, which Spark signals to stop its workers
        _redirect(os.devnull, address + ".log")
        name_process(STARTER_TITLE.format(owner=owner))
        serve(listener, owner, address)
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def serve(listener: socket.socket, owner: int, address: str) -> None:
    """Fork a host for each address asked, until the daemon ``owner`` is gone."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the kernel reaps the hosts that exit
    listener.settimeout(_ACCEPT_TICK_S)
    try:
        while os.getppid() == owner:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(ASK_TIMEOUT_S)
                try:
                    host = _read_all(conn).decode()
                    conn.sendall(str(_fork_host(host, owner, address, inherited=(listener, conn))).encode())
                except (OSError, UnicodeDecodeError) as exc:   # that worker starts its host itself
                    print(f"starter: request not served: {exc}", file=sys.stderr, flush=True)
    finally:
        listener.close()
        Path(address).unlink(missing_ok=True)
        log = Path(address + ".log")
        if log.exists() and log.stat().st_size == 0:
            log.unlink()


def _fork_host(host: str, owner: int, address: str, inherited: tuple[socket.socket, ...]) -> int:
    """Fork the engine host for ``host``, an address of this starter's daemon; its pid, or 0.
    The host closes the ``inherited`` sockets: the worker waiting for the reply reads until the
    starter closes the connection, which a host holding it open would delay."""
    folder, name = Path(address).parent, Path(host).name
    if Path(host).parent != folder or not (name.startswith(f"{owner}-p") and name[len(f"{owner}-p"):].isdigit()):
        print(f"starter: {host!r} is not a host address of daemon {owner}; not started", file=sys.stderr, flush=True)
        return 0
    pid = os.fork()
    if pid:
        return pid
    status = 1
    try:
        for inherited_socket in inherited:
            inherited_socket.close()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _redirect(os.devnull, host + ".log")
        from streaming.spark.engine_host import Host

        Host(host, owner).serve()
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def ask(host: str, owner: int) -> int | None:
    """In a worker: have the starter of the daemon ``owner`` fork the host for ``host``; the
    host's pid, or None when no starter answers or it refused."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ASK_TIMEOUT_S)
    try:
        sock.connect(address_beside(host, owner))
        sock.sendall(host.encode())
        sock.shutdown(socket.SHUT_WR)   # the whole request: the starter reads to its end
        pid = int(_read_all(sock).decode() or 0)
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
    return pid or None


def name_process(title: str) -> None:
    """Show ``title`` as this process's command line."""
    from setproctitle import setproctitle

    setproctitle(title)


def _read_all(sock: socket.socket, limit: int = 4096) -> bytes:
    """What the other end sent until it shut its side (at most ``limit`` bytes)."""
    data = b""
    while len(data) < limit:
        chunk = sock.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _redirect(stdio: str, errors: str) -> None:
    """stdin and stdout from/to ``stdio``, stderr appended to ``errors``: the daemon's own are
    pipes to the JVM, which must not wait on a starter or a host to close them."""
    with open(stdio, "r+b") as null, open(errors, "ab") as log:
        os.dup2(null.fileno(), 0)
        os.dup2(null.fileno(), 1)
        os.dup2(log.fileno(), 2)
