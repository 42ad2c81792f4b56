"""start_study (the Python API) while the home's study host runs: a study refused at its first
launch comes back as the call's error, as for a process of its own, and is taken back from the
host (its spec and the folder the call made), so the fixed rerun lands in the host and runs.

The host is a real `autoresearch host run` subprocess on the test's home (its default folder).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ar_helpers import small_study
from helpers import wait_until

from air_skills.errors import AirError
from autoresearch.api import start_study
from autoresearch.journal.journal import Journal, TrialStatus, replay
from autoresearch.study.host_folder import host_alive, host_dir, spec_files


@pytest.mark.slow
@pytest.mark.timeout(300)  # a bound, not a measure
def test_a_hosted_start_refused_at_its_first_launch_is_taken_back_and_the_fix_runs(
    study_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIR_STUDY_HOST", raising=False)
    outside = tmp_path / "outside"
    outside.mkdir()
    data = small_study(name="refused", budget={"trials": 1, "concurrency": 1})
    refused, fixed = tmp_path / "refused.yaml", tmp_path / "fixed.yaml"
    refused.write_text(yaml.safe_dump({**data, "writable": [str(outside)]}))  # not a data root
    fixed.write_text(yaml.safe_dump(data))
    folder = tmp_path / "study"
    log = tmp_path / "host.out"
    with open(log, "ab") as out:
        host = subprocess.Popen(
            [sys.executable, "-m", "autoresearch.cli", "host", "run"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: host_alive(host_dir()), timeout_s=120, every_s=0.1)
        with pytest.raises(AirError) as info:
            start_study(str(refused), str(folder))
        assert info.value.code == "writable-refused", info.value.to_dict()
        assert "study host" in info.value.hint, info.value.hint
        assert not folder.exists()  # nothing ran: the folder this call made is gone
        assert spec_files(host_dir()) == []  # and the host holds no spec of it

        reply = start_study(str(fixed), str(folder))  # the same name and folder: not refused
        assert reply["hosted_by"]["pid"] == host.pid, reply
        wait_until(lambda: replay(Journal(folder).read()).stopped, timeout_s=180, every_s=0.2)
        state = replay(Journal(folder).read())
        assert [t.status for t in state.trials.values()] == [TrialStatus.SUCCEEDED]
        sessions = [e["pid"] for e in Journal(folder).read() if e["event"] == "session_started"]
        assert sessions == [host.pid]
    finally:
        host.send_signal(signal.SIGTERM)
        code = host.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
