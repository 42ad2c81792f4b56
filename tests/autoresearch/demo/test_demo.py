"""`autoresearch demo`: budgeted by trials (not wall time), short trials, a visible win over the
baseline, and the paths of the report and the plot (issue 23)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch.cli import DEMO_BASE, demo_study, find_examples


def test_the_demo_is_budgeted_by_trials_with_short_trials() -> None:
    study = demo_study(find_examples(), "tpe", 12)
    assert study["budget"]["trials"] == 12 and "wall_time_min" not in study["budget"]
    assert study["base_config"]["steps"] == DEMO_BASE["steps"] <= 300
    assert study["early_stopping"]["min_steps"] < study["base_config"]["steps"]


@pytest.mark.slow
def test_the_demo_shows_a_win_and_prints_the_report_and_plot(
    air_home: Path, tmp_path: Path
) -> None:
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        [str(bin_dir / "autoresearch"), "demo", "--trials", "6", "--no-page"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "COLUMNS": "200"},
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    gain = re.search(r"baseline val_loss \S+ -> best \S+ \((-?\d+)% lower\)", done.stdout)
    assert gain and int(gain.group(1)) >= 20, done.stdout[-2000:]
    # the final re-evaluation's validation gain beside its held-out gain (issue 40)
    held = r"final re-evaluation, trial \d+ vs the baseline: val_loss [-+]\d+\.\d%, held-out"
    assert re.search(held, done.stdout), done.stdout[-2000:]
    report = re.search(r"^report: (\S+)$", done.stdout, re.M)
    plot = re.search(r"^plot:\s+(\S+)$", done.stdout, re.M)
    assert report and Path(report.group(1)).is_file()
    assert plot and Path(plot.group(1)).is_file() and plot.group(1).endswith(".png")


def test_a_demo_whose_study_fails_exits_3(air_home: Path, tmp_path: Path) -> None:
    """As `autoresearch run`: a demo whose baseline fails says so and exits 3, not 0. The demo
    finds examples/mlp under the current folder first: here a copy whose script fails."""
    import shutil

    mlp = tmp_path / "examples" / "mlp"
    shutil.copytree(find_examples() / "mlp", mlp)
    (mlp / "train.py").write_text("import sys\nsys.exit('broken on purpose')\n")
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        [str(bin_dir / "autoresearch"), "demo", "--trials", "3", "--no-page"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "COLUMNS": "200"},
        timeout=600,
    )
    assert done.returncode == 3, (done.stdout[-1500:], done.stderr[-1500:])
    assert "demo study failed: exit 3" in done.stderr
