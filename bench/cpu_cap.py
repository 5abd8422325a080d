"""Run a benchmark on fewer cores than the host has: the command and every process it starts get
at most ``--cores`` cores' worth of CPU time (a Linux cgroup's CPU quota, what ``docker run
--cpus`` sets). This shared host has slow hours the benchmarks cannot choose (bench/RESULTS.md:
the same live batch took 0.37 s in one hour and 0.67 s in another); a cap gives a smaller host
on demand, the same in every run, for two codes to be compared on.

A cap is not a slower core: one busy process still runs at the core's full speed while the
group has quota left, and the group waits out the rest of a period once its quota is spent (the
short default period keeps that wait to a few milliseconds). Needs root and the cgroup ``cpu``
controller (v1's /sys/fs/cgroup/cpu or v2's /sys/fs/cgroup).

    .venv/bin/python bench/cpu_cap.py --cores 1.4 -- .venv/bin/python bench/detection_latency.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

V2_ROOT = Path("/sys/fs/cgroup")
V1_CPU_ROOT = Path("/sys/fs/cgroup/cpu")


class CpuCap:
    """A cgroup of its own with a CPU quota of ``cores`` a ``period_us``; ``enter()`` moves the
    calling process in (its children inherit it), ``close()`` moves it back and removes the
    group once its last process has gone."""

    def __init__(self, cores: float, period_us: int = 10_000):
        if cores <= 0:
            raise ValueError(f"cores must be above 0, got {cores}")
        quota_us = round(cores * period_us)
        name = f"epochwatch-cap-{os.getpid()}"
        if "cpu" in _read(V2_ROOT / "cgroup.controllers").split():
            self.home = V2_ROOT / _own_cgroup(None)
            self.path = self.home / name
            self.path.mkdir()
            if not (self.path / "cpu.max").exists():  # the controller is not handed down to this level
                self.path.rmdir()
                raise RuntimeError(f"the cpu controller is not enabled for the children of {self.home} "
                                   "(its cgroup.subtree_control)")
            (self.path / "cpu.max").write_text(f"{quota_us} {period_us}")
        elif (V1_CPU_ROOT / "cpu.cfs_quota_us").exists():
            self.home = V1_CPU_ROOT / _own_cgroup("cpu")
            self.path = self.home / name
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(period_us))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            raise RuntimeError("no cgroup cpu controller found at /sys/fs/cgroup (v2) or /sys/fs/cgroup/cpu (v1)")

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def throttled_seconds(self) -> float:
        """How long the group has waited for its quota so far (cpu.stat)."""
        stat = dict(line.split() for line in _read(self.path / "cpu.stat").splitlines() if line.strip())
        if "throttled_usec" in stat:
            return int(stat["throttled_usec"]) / 1e6
        return int(stat.get("throttled_time", 0)) / 1e9

    def close(self, wait_s: float = 30.0) -> list[int]:
        """Leave the group and remove it; the pids still in it after ``wait_s`` (left running:
        the group stays) are returned."""
        (self.home / "cgroup.procs").write_text(str(os.getpid()))
        deadline = time.monotonic() + wait_s
        while (left := [int(p) for p in _read(self.path / "cgroup.procs").split()]) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not left:
            self.path.rmdir()
        return left


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _own_cgroup(v1_controller: str | None) -> str:
    """This process's cgroup (/proc/self/cgroup), relative to its hierarchy's root: v1's for
    ``v1_controller``, or v2's unified one (id 0, no controllers listed) for None."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        unified = hierarchy == "0" and controllers == ""
        if unified if v1_controller is None else v1_controller in controllers.split(","):
            return path.lstrip("/")
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", type=float, required=True, help="CPU time allowed, in cores (e.g. 1.4)")
    ap.add_argument("--period-ms", type=float, default=10.0,
                    help="the quota's period: the longest the group waits once its quota is spent")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to run after --")
    try:
        cap = CpuCap(args.cores, round(args.period_ms * 1000))
    except (OSError, RuntimeError, ValueError) as e:
        print(f"cpu_cap: cannot make a capped cgroup ({e}); it needs root and the cgroup cpu controller",
              file=sys.stderr)
        return 2
    cap.enter()
    try:
        code = subprocess.call(command)
    finally:
        throttled = cap.throttled_seconds()
        left = cap.close()
    print(f"cpu cap: {args.cores:g} cores a {args.period_ms:g} ms period; the group waited {throttled:.1f} s "
          "for its quota" + (f"; pids still in {cap.path}: {left}" if left else ""), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
