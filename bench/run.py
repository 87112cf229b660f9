"""`make bench`: run every benchmark and write docs/benchmarks.md (not part of CI)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = [
    ("Admission engine: one full plan", ["bench/bench_admission.py"]),
    ("Reconcile: one cycle against the simulated cluster", ["bench/bench_reconcile.py"]),
    ("Pages, API and submissions under gunicorn", ["bench/bench_web.py"]),
    ("Chargeback: a monthly statement", ["bench/bench_chargeback.py"]),
    ("Estimated starts: a replay through the portal's stack", ["bench/bench_estimates.py"]),
    (
        "End to end: Kueue's scheduler benchmark replayed through the whole portal",
        ["bench/bench_kueue_replay.py"],
    ),
    ("Operations dashboard and /metrics under gunicorn", ["bench/bench_ops.py"]),
]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def main() -> int:
    sections = [
        "# Benchmarks",
        "",
        f"Written by `make bench` on {datetime.date.today().isoformat()}, on: {machine()}.",
        "Absolute times on a shared machine are noisy; compare rows of one run.",
    ]
    for title, command in BENCHMARKS:
        print(f"== {title}", flush=True)
        result = subprocess.run(
            [sys.executable, *command], cwd=ROOT, capture_output=True, text=True, check=True
        )
        print(result.stdout)
        sections += ["", f"## {title}", "", result.stdout.strip()]
    (ROOT / "docs" / "benchmarks.md").write_text("\n".join(sections) + "\n")
    print("wrote docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
