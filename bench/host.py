"""The host a benchmark runs on, printed beside its figures. These machines are shared: the same
code's live batches took 0.37 s at the median in one hour and 0.67 s in another (bench/HISTORY.md,
sessions 33-35), so a figure is only read together with how fast the host was and where its CPU
went in the same run.

- ``python_speed``: the loop steps a second one busy Python process gets done (the rules, the
  source's decoding and the state API's client are Python; the engine hosts are all Python).
- ``host_parallelism``: the work two busy processes get done side by side, over one alone's.
- ``cpu_seconds_by_role``: the CPU used so far by the benchmark's processes, by what they are.
- ``RoundTrips``: how long a hand-off between two processes takes, alone and under the run's load.
"""

from __future__ import annotations

import os
import statistics
import time


def _spin(seconds: float) -> int:
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10_000):
            n += 1
    return n


def python_speed(seconds: float = 0.5, rounds: int = 3) -> float:
    """Millions of loop steps a second in this process, median of ``rounds``."""
    _spin(seconds / 2)
    return statistics.median(_spin(seconds) / seconds / 1e6 for _ in range(rounds))


def host_parallelism(seconds: float = 1.0, rounds: int = 3) -> float:
    """Work two busy processes get done side by side, over one alone's (2.0: two whole cores),
    median of ``rounds``. Spark's two tasks need both cores, the floor and the single process one,
    so ratio 1/3 of bench/head_to_head.py moves with this figure from host to host
    (bench/RESULTS.md, head to head, session 12)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_spin, [seconds / 2] * 2)  # processes started and clocks up before measuring
        ratios = [sum(pool.map(_spin, [seconds] * 2)) / pool.apply(_spin, (seconds,)) for _ in range(rounds)]
    return statistics.median(ratios)


def host_line(parallelism: float, speed: float) -> str:
    return (f"host: one busy Python process ran {speed:.1f} million loop steps/s; two side by side did "
            f"{parallelism:.2f}x the work of one (2.00: two whole cores)")


def _role(command: str) -> str:
    if "bench.host import _ping" in command:
        return "round trips"
    if "tansu" in command or "kafka.Kafka" in command:
        return "broker"
    if "java" in command.split(" ")[0]:
        return "spark JVM"
    # the hosts and their starter by their titles; an older tree's hosts (A/B runs) by their module
    if command.startswith("epochwatch engine host") or "streaming.spark.engine_host" in command:
        return "engine hosts"
    if "pyspark" in command:
        return "python workers"
    if "multiprocessing" in command and "spawn_main" in command:
        return "load producer"
    return "bench/driver"


def cpu_seconds_by_role() -> dict[str, float]:
    """CPU seconds used so far by this process and its descendants, by role (Linux /proc). A
    process's figure holds its threads that have ended, not its children that have."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu, command = {}, {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent[pid] = fields[1]
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    me, totals = str(os.getpid()), {}
    for pid in cpu:
        ancestor = pid
        while ancestor not in (me, "0", "1") and ancestor in parent:
            ancestor = parent[ancestor]
        if ancestor == me:
            role = _role(command[pid])
            totals[role] = totals.get(role, 0.0) + cpu[pid]
    return totals


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after if after[k] - before.get(k, 0.0) >= 0.05}


def machine_times() -> tuple[int, int]:
    """(all, idle) clock ticks of every core since boot (/proc/stat; idle counts waiting on I/O)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of all cores' time that was busy between two ``machine_times``."""
    total = after[0] - before[0]
    return (total - (after[1] - before[1])) / total if total else 0.0


def nearest_rank(ordered: list[float], q: float) -> float:
    """The value at quantile ``q`` of ``ordered`` (sorted, not empty), by rank."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


ROUND_TRIP_EVERY_S = 0.05


class RoundTrips:
    """Round trips between two processes over a Unix socket pair, one every ROUND_TRIP_EVERY_S
    while it runs: how long a process waits to be woken on this host, under the load around it. A
    micro-batch is a chain of such hand-offs (the JVM and its Python workers, a worker and its
    engine host, the state API's calls), which two busy loops side by side do not see. The pair
    runs in a process of its own (``_ping``), so the GIL of the benchmark's process is not in it."""

    def __init__(self):
        import subprocess
        import sys

        tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where ``bench`` imports from
        self._process = subprocess.Popen(
            [sys.executable, "-c", f"from bench.host import _ping; _ping({ROUND_TRIP_EVERY_S!r})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)

    def stop(self) -> list[float]:
        """The round trips measured, in seconds."""
        out, _ = self._process.communicate("stop\n", timeout=30)
        return [float(v) for v in out.split()]


def _ping(interval: float) -> None:
    """RoundTrips' process: a round trip to an echoing child every ``interval`` s until a line comes
    on stdin, then each one's seconds on stdout."""
    import select
    import socket
    import sys

    mine, theirs = socket.socketpair()
    if os.fork() == 0:
        mine.close()
        while data := theirs.recv(64):
            theirs.sendall(data)
        os._exit(0)
    theirs.close()
    times = []
    while not select.select([sys.stdin], [], [], interval)[0]:
        started = time.perf_counter()
        mine.sendall(b"x")
        mine.recv(64)
        times.append(time.perf_counter() - started)
    mine.close()
    os.wait()
    print(" ".join(f"{t:.7f}" for t in times))


def round_trips_line(idle: list[float], loaded: list[float], what: str) -> str:
    def figures(times: list[float]) -> str:
        if not times:
            return "none measured"
        times = sorted(times)
        at = lambda q: nearest_rank(times, q) * 1e6
        return f"median {at(.5):.0f} us, p90 {at(.9):.0f}, p99 {at(.99):.0f} ({len(times)})"

    return (f"round trips between two processes, one every {ROUND_TRIP_EVERY_S * 1000:.0f} ms: before the job "
            f"started {figures(idle)}; {what} {figures(loaded)}")
