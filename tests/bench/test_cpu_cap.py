"""bench/cpu_cap.py: a command runs inside a cgroup of its own with the quota asked for, and the
group is gone when it ends. Needs root and a cgroup cpu controller, as the tool does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.cpu_cap import V1_CPU_ROOT, V2_ROOT, CpuCap, main

ROOT = Path(__file__).resolve().parents[2]


def _cap_or_skip(cores: float, period_us: int = 10_000) -> CpuCap:
    try:
        return CpuCap(cores, period_us)
    except (OSError, RuntimeError) as e:
        pytest.skip(f"no cgroup to make here ({e})")


def _quota(cap: CpuCap) -> tuple[int, int]:
    if (cap.path / "cpu.max").exists():
        quota, period = (cap.path / "cpu.max").read_text().split()
        return int(quota), int(period)
    return int((cap.path / "cpu.cfs_quota_us").read_text()), int((cap.path / "cpu.cfs_period_us").read_text())


def test_the_group_holds_the_quota_asked_for_and_is_removed_when_empty():
    cap = _cap_or_skip(1.4, 20_000)
    try:
        assert _quota(cap) == (28_000, 20_000)
    finally:
        assert cap.close(wait_s=0) == []
    assert not cap.path.exists()


def test_a_command_and_its_children_run_in_the_capped_group_and_are_throttled():
    cap = _cap_or_skip(0.2)
    spin = textwrap.dedent("""
        import multiprocessing, time
        def spin():
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                pass
        if __name__ == "__main__":
            workers = [multiprocessing.Process(target=spin) for _ in range(2)]
            [w.start() for w in workers]
            [w.join() for w in workers]
            print(open("/proc/self/cgroup").read())
    """)
    cap.enter()
    try:
        out = subprocess.run([sys.executable, "-c", spin], capture_output=True, text=True, check=True).stdout
        throttled = cap.throttled_seconds()
    finally:
        assert cap.close() == []
    assert f"/{cap.path.name}\n" in out
    assert throttled > 0, "two busy processes on a fifth of a core were never held back"
    assert cap.path.name not in open("/proc/self/cgroup").read()


def test_the_tool_runs_the_command_after_the_double_dash_and_returns_its_exit_code(tmp_path):
    _cap_or_skip(1.0).close(wait_s=0)
    marker = tmp_path / "ran"
    command = [sys.executable, "bench/cpu_cap.py", "--cores", "1", "--",
               sys.executable, "-c", f"open({str(marker)!r}, 'w').write(open('/proc/self/cgroup').read()); exit(3)"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    lines = marker.read_text().splitlines()
    groups = [line.split(":", 2)[2].lstrip("/") for line in lines if "epochwatch-cap-" in line]
    assert groups, lines
    assert not any((root / g).exists() for root in (V1_CPU_ROOT, V2_ROOT) for g in groups)
    assert "cpu cap: 1 cores a 10 ms period" in done.stderr


def test_no_command_or_no_cores_is_refused_with_what_to_give(capsys):
    with pytest.raises(SystemExit):
        main(["--cores", "1"])
    assert "give the command to run after --" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cores must be above 0"):
        CpuCap(0)
