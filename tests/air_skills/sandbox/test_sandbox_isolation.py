"""Issue 37 (3, 4, 16): a sandboxed job sees no disk, no host /dev/shm or /dev/kmsg, none of
root's files, and none of the host's loopback services; both ways of starting a sandbox.

As root (as here and on many GPU machines) the job runs as AIR_SANDBOX_UID: a user namespace
alone would leave it host uid 0, owner of root's 0600 files and of the disk nodes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from helpers import spares_ready, started_ahead, wait_until

from air_skills import Client, JobSpec, JobStatus
from air_skills.runtime.execution import sandbox, sandbox_net

PY = sys.executable
pytestmark = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)
BOTH = pytest.mark.parametrize("made_ahead", [False, True], ids=["bwrap-at-start", "made-ahead"])

PROBE = r"""
import json, os, socket, sys
cfg = json.loads(sys.argv[1])
out = {"uid": os.getuid(), "dev": sorted(os.listdir("/dev"))}
def attempt(name, fn):
    try:
        out[name] = fn()
    except OSError as exc:
        out[name] = f"refused: {type(exc).__name__}"
out["secret"] = attempt("secret", lambda: open(cfg["secret"]).read()) or out["secret"]
attempt("kmsg", lambda: open("/dev/kmsg", "w").write("job\n") and "written")
out["host_shm_seen"] = os.path.exists(cfg["host_shm"])
open(cfg["job_shm"], "w").write("job")  # /dev/shm is writable: its own
def call(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    return s.recv(16).decode()
attempt("loopback", lambda: call(cfg["port"]))
out["interfaces"] = [n for _, n in socket.if_nameindex()]
print("PROBE " + json.dumps(out), flush=True)
"""


def _loopback_server() -> tuple[socket.socket, int]:
    """A TCP server on the host's 127.0.0.1 that answers ``host`` to whoever connects."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"host")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def _job_uid() -> int:
    """The uid a root-run job becomes: AIR_SANDBOX_UID, by default the air-sandbox user's."""
    user = sandbox.job_user()
    assert user is not None
    return user[0]


def _ready_ahead(client: Client, air_home: Path) -> None:
    first = client.launch(JobSpec(command=["true"], track=False, sandbox="off"))
    assert client.wait([first.job_id], timeout_s=60)[0].status == JobStatus.SUCCEEDED
    wait_until(lambda: spares_ready(air_home), timeout_s=60)


@BOTH
@pytest.mark.parametrize("network", [True, False], ids=["network", "no-network"])
def test_no_disk_no_host_shm_no_kmsg_no_root_file_no_host_loopback(
    client: Client,
    air_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    made_ahead: bool,
    network: bool,
) -> None:
    if made_ahead:
        _ready_ahead(client, air_home)
    else:
        monkeypatch.setenv("AIR_SANDBOX_AHEAD", "off")
    # A root-owned 0600 file the sandbox does not hide (not under /tmp, AIR_HOME or /root).
    folder = Path("/var/tmp") / f"air-test-{uuid.uuid4().hex}"
    folder.mkdir(mode=0o755)
    secret = folder / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    tag = uuid.uuid4().hex
    host_shm, job_shm = Path(f"/dev/shm/air-host-{tag}"), Path(f"/dev/shm/air-job-{tag}")
    host_shm.write_text("host")
    srv, port = _loopback_server()
    try:
        cfg = {"secret": str(secret), "host_shm": str(host_shm), "job_shm": str(job_shm)}
        cfg["port"] = port
        script = tmp_path / "probe.py"
        script.write_text(PROBE + "import time; time.sleep(0.3)\n")
        spec = JobSpec(
            command=[PY, str(script), json.dumps(cfg)], track=False, sandbox="on", network=network
        )
        info = client.launch(spec)
        pid = wait_until(lambda: client.store.row(info.job_id).job_pid, timeout_s=60)
        ahead = started_ahead(pid)
        done = client.wait([info.job_id], timeout_s=120)[0]
        log = client.logs(info.job_id, tail=None).text
        assert done.status == JobStatus.SUCCEEDED, (done.message, log)
        seen = json.loads(log.split("PROBE ", 1)[1].splitlines()[0])
        assert not job_shm.exists()  # what the job wrote in /dev/shm stayed in its own
    finally:
        srv.close()
        host_shm.unlink()
        secret.unlink()
        folder.rmdir()
    if made_ahead and network == (sandbox_net.slirp_path() is not None or not network):
        assert ahead  # the spare fits the job (network or not): it was used
    # A fresh minimal /dev: no disk, loop or zram node, no kmsg; a private, writable shm.
    assert set(seen["dev"]) <= {
        "core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
        "stdout", "tty", "urandom", "zero",
    }  # fmt: skip
    assert seen["kmsg"].startswith("refused")
    assert seen["host_shm_seen"] is False
    # The host's loopback service is out of reach, with network or without.
    assert seen["loopback"].startswith("refused"), seen
    if os.geteuid() == 0:  # as root the job is AIR_SANDBOX_UID (air-sandbox's), not uid 0
        assert seen["uid"] == _job_uid() != 0
        assert seen["secret"] == "refused: PermissionError"
    if network and sandbox_net.slirp_path() is not None:
        assert "tap0" in seen["interfaces"]  # outbound through slirp4netns
    else:
        assert seen["interfaces"] == ["lo"]


def test_a_job_writes_its_folder_and_checkpoints_across_a_retry_as_its_uid(
    client: Client, tmp_path: Path
) -> None:
    """The job's folder is handed to its uid: checkpoints of attempt 1 are there, writable,
    in attempt 2; the supervisor reads what the job wrote (its metrics)."""
    script = tmp_path / "retry.py"
    script.write_text(
        "import os, sys\n"
        "ck = os.path.join(os.environ['AIR_CHECKPOINT_DIR'], 'step')\n"
        "n = int(open(ck).read()) if os.path.exists(ck) else 0\n"
        "open(ck, 'w').write(str(n + 1))\n"
        "open(os.path.join(os.path.dirname(os.environ['AIR_CONFIG_FILE']), 'out.txt'), 'w')"
        ".write('out')\n"
        "from mlflow.tracking import MlflowClient\n"
        "MlflowClient().log_metric(os.environ['MLFLOW_RUN_ID'], 'loss', 1.0 / (n + 1), step=n)\n"
        "sys.exit(3 if n == 0 else 0)\n"
    )
    info = client.launch(JobSpec(command=[PY, str(script)], sandbox="on", max_retries=1))
    done = client.wait([info.job_id], timeout_s=120)[0]
    assert done.status == JobStatus.SUCCEEDED, (done.message, client.logs(info.job_id).text)
    jdir = client.home / "jobs" / info.job_id
    assert (jdir / "checkpoints" / "step").read_text() == "2"
    assert (jdir / "out.txt").read_text() == "out"
    if os.geteuid() == 0:
        assert (jdir / "checkpoints" / "step").stat().st_uid == _job_uid()
        assert (jdir / "record.json").stat().st_uid == 0  # what air reads back stays air's
    from mlflow.tracking import MlflowClient

    from air_skills.tracking.mlflow import tracking_uri

    run = MlflowClient(tracking_uri(client.home)).get_run(client.get(info.job_id).run_id)
    assert run.data.metrics["loss"] == 0.5


def test_hand_over_never_follows_a_link_or_a_hard_link(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("hand_over changes owners: root only")
    jdir = tmp_path / "job"
    (jdir / "sub").mkdir(parents=True)
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim = victim_dir / "file"
    victim.write_text("root's")
    (jdir / "link").symlink_to(victim)
    (jdir / "dirlink").symlink_to(victim_dir)
    os.link(victim, jdir / "hard")
    (jdir / "sub" / "mine").write_text("air wrote it")
    (jdir / "kept").write_text("stays air's")
    sandbox.hand_over(str(jdir), (65534, 65534), [str(jdir / "kept")])  # any uid not root's
    assert (jdir / "sub" / "mine").stat().st_uid == 65534
    assert jdir.stat().st_uid == 65534 and (jdir / "sub").stat().st_uid == 65534
    assert victim.stat().st_uid == 0 and victim_dir.stat().st_uid == 0
    assert (jdir / "kept").stat().st_uid == 0
    assert os.lstat(jdir / "link").st_uid == 0


def test_without_slirp4netns_a_job_has_loopback_only_and_its_log_says_so(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_SLIRP4NETNS", "no-such-slirp4netns")
    probe = "import socket; print('IF', [n for _, n in socket.if_nameindex()])"
    info = client.launch(JobSpec(command=[PY, "-c", probe], track=False, sandbox="on"))
    done = client.wait([info.job_id], timeout_s=60)[0]
    log = client.logs(info.job_id, tail=None).text
    assert done.status == JobStatus.SUCCEEDED, (done.message, log)
    assert "IF ['lo']" in log and "no network for this job" in log


def test_a_sandbox_that_ends_before_its_job_runs_is_made_again(tmp_path: Path) -> None:
    """bwrap's loopback set-up can fail under load before the job runs ("loopback: Failed
    RTM_NEWADDR"): the start is tried once more, and the log says so."""
    slirp = sandbox_net.slirp_path()
    if slirp is None:
        pytest.skip("no slirp4netns here")
    real = sandbox.bwrap_path()
    marker = tmp_path / "failed-once"
    flaky = tmp_path / "flaky-bwrap"
    flaky.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {marker} ]; then touch {marker}; echo 'bwrap: loopback: Failed' >&2;"
        " exit 1; fi\n"
        f'exec {real} "$@"\n'
    )
    flaky.chmod(0o755)
    argv = [str(flaky), "--ro-bind", "/", "/", "--unshare-net", "--", "sh", "-c", "echo ran"]
    log_path = tmp_path / "log"
    with open(log_path, "wb") as log:
        child = sandbox_net.popen(argv, slirp, log, stdout=log, stderr=log)
        assert child.wait() == 0
    text = log_path.read_text()
    assert "made again" in text and text.rstrip().endswith("ran")


def test_the_host_network_is_granted_by_air_sandbox_network_host(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the user grants it (AIR_SANDBOX_NETWORK=host), a sandboxed job reaches the
    host's loopback services again; network: false still cuts it."""
    monkeypatch.setenv("AIR_SANDBOX_NETWORK", "host")
    srv, port = _loopback_server()
    try:
        call = (
            f"import socket; print('GOT', socket.create_connection(('127.0.0.1', {port})).recv(8))"
        )
        info = client.launch(JobSpec(command=[PY, "-c", call], track=False, sandbox="on"))
        done = client.wait([info.job_id], timeout_s=60)[0]
        log = client.logs(info.job_id, tail=None).text
        assert done.status == JobStatus.SUCCEEDED and "GOT b'host'" in log, (done.message, log)
        cut = client.launch(
            JobSpec(command=[PY, "-c", call], track=False, sandbox="on", network=False)
        )
        assert client.wait([cut.job_id], timeout_s=60)[0].status == JobStatus.FAILED
    finally:
        srv.close()


def test_slirp4netns_never_races_bwraps_loopback_set_up(tmp_path: Path) -> None:
    """slirp4netns configuring the namespace while bwrap brings its loopback up made bwrap
    fail ("loopback: Failed RTM_NEWADDR") about one start in 40: it waits for lo now. 120
    starts, three at a time; none may need a second try."""
    slirp = sandbox_net.slirp_path()
    if slirp is None:
        pytest.skip("no slirp4netns here")
    argv = [sandbox.bwrap_path() or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
    argv += ["--unshare-pid", "--unshare-net", "--proc", "/proc", "--", "/bin/true"]
    failed: list[str] = []

    def starts(n: int) -> None:
        for _ in range(n):
            child, ran = sandbox_net._popen_once(argv, slirp, None, stderr=subprocess.PIPE)
            err = child.stderr.read() if child.stderr else b""
            if child.wait() != 0 or not ran:
                failed.append(err.decode(errors="replace"))

    threads = [threading.Thread(target=starts, args=(40,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
