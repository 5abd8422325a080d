"""The processes of a running `epochwatch run`, read from /proc: its Python workers (forked by
Spark's worker daemon, udfs.worker_daemon) and its engine hosts (streaming.spark.engine_host, named
by streaming.spark.host_starter.HOST_TITLE), so that a fault test or bench/faults.py can kill one of
them."""

from __future__ import annotations

import os
from pathlib import Path

from streaming.spark.host_starter import HOST_TITLE

WORKER_MODULE = "udfs.worker_daemon"


def process_table() -> dict[int, tuple[int, list[str]]]:
    """pid -> (parent pid, command line) of every process this user can see."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:   # gone meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])   # the name in parentheses may hold spaces
        table[int(entry.name)] = (ppid, [a.decode(errors="replace") for a in argv if a])
    return table


def descendants(root: int, table: dict | None = None) -> set[int]:
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _runs(argv: list[str], module: str) -> bool:
    return module in argv


def worker_daemons(root: int) -> list[int]:
    """Spark's Python worker daemons under ``root`` (the job's driver process)."""
    table = process_table()
    return sorted(p for p in descendants(root, table)
                  if _runs(table[p][1], WORKER_MODULE) and not _runs(table.get(table[p][0], (0, []))[1], WORKER_MODULE))


def python_workers(root: int) -> list[int]:
    """The Python workers under ``root``: forked by a worker daemon, so with its command line."""
    table = process_table()
    return sorted(p for p in descendants(root, table)
                  if _runs(table[p][1], WORKER_MODULE) and _runs(table.get(table[p][0], (0, []))[1], WORKER_MODULE))


def engine_hosts(root: int) -> list[int]:
    """The engine hosts of the worker daemons under ``root``, matched by their title, which names
    their daemon (forked by the daemon's starter or started on their own, they run in sessions of
    their own)."""
    titles = {HOST_TITLE.format(owner=daemon, address="") for daemon in worker_daemons(root)}
    return sorted(pid for pid, (_, argv) in process_table().items()
                  if argv and any(argv[0].startswith(title) for title in titles))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def resident_kib(pids) -> int:
    """The summed resident memory of ``pids`` (VmRSS), in KiB; gone processes count 0."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total
