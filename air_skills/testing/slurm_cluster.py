"""A throwaway single-node Slurm cluster on this machine (munge, slurmctld, slurmd), for tests.

Runs as root without systemd, with count-only GPUs: ``gres.conf`` names four character devices
that every Linux has (``/dev/tty0..3``), so Slurm hands out GPU indices and sets
``CUDA_VISIBLE_DEVICES`` without any GPU (Slurm drops file-less GPUs from a node's GRES).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

NEEDED = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def missing() -> str | None:
    """Why a local cluster cannot start here (None: it can)."""
    absent = [b for b in NEEDED if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): make install adds it"
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root here (SlurmUser=root)"
    if not Path("/dev/tty3").exists():
        return "no /dev/tty0..3 to stand for count-only GPUs"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class LocalSlurmCluster:
    """``with LocalSlurmCluster() as cluster:`` sets ``SLURM_CONF`` for this process."""

    def __init__(self, gpus: int = 4, cpus: int = 2, min_job_age_s: int = 300) -> None:
        self.gpus, self.cpus, self.min_job_age_s = gpus, cpus, min_job_age_s
        self.root = Path(tempfile.mkdtemp(prefix="air-slurm-"))
        self.conf = self.root / "slurm.conf"
        self.host = socket.gethostname().split(".")[0]
        self._old_conf: str | None = None

    def write_conf(self) -> None:
        r = self.root
        for sub in ("state", "spool", "log"):
            (r / sub).mkdir(exist_ok=True)
        lines = [
            "ClusterName=airtest",
            # every daemon on 127.0.0.1 only: the controller at the loopback address, the node
            # reached there, and neither bound to any address (Slurm's default is 0.0.0.0)
            f"SlurmctldHost={self.host}(127.0.0.1)",
            "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmUser=root",
            "SlurmdUser=root",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "GresTypes=gpu",
            f"MinJobAge={self.min_job_age_s}",
            "KillWait=2",
            "SlurmdTimeout=10",
            "SchedulerParameters=sched_interval=1",
            "PriorityType=priority/basic",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=4000"
            f" Gres=gpu:{self.gpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        last = self.gpus - 1
        (r / "gres.conf").write_text(f"Name=gpu File=/dev/tty[0-{last}]\n")

    def start(self, timeout_s: float = 60.0) -> LocalSlurmCluster:
        why = missing()
        if why:
            raise RuntimeError(why)
        self.write_conf()
        self._start_munge()
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run([_binary("slurmctld"), "-f", str(self.conf)], env=env, check=True)
        self.start_slurmd()
        self._old_conf = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(self.conf)
        self.wait_idle(timeout_s)
        return self

    def start_slurmd(self) -> None:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run([_binary("slurmd"), "-f", str(self.conf)], env=env, check=True)

    def kill_slurmd(self) -> None:
        """SIGKILL the node's daemon (its jobs' processes go on, as on a real node crash)."""
        pid = int((self.root / "slurmd.pid").read_text())
        os.kill(pid, signal.SIGKILL)

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Until the node accepts jobs (resumed when it registered before the controller)."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, check=False
            ).stdout.strip()
            if out in ("idle", "mixed", "allocated"):
                return
            if out and ("inval" in out or "down" in out or "drain" in out):
                subprocess.run(
                    ["scontrol", "update", f"nodename={self.host}", "state=resume"],
                    capture_output=True,
                    check=False,
                )
            if time.monotonic() > deadline:
                log = (self.root / "log" / "slurmctld.log").read_text()[-2000:]
                raise RuntimeError(f"the Slurm node never became idle ({out!r}): {log}")
            time.sleep(0.3)

    @staticmethod
    def _start_munge() -> None:
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
            return
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(
            ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", _binary("munged")],
            check=True,
        )

    def stop(self) -> None:
        for name in ("slurmd.pid", "slurmctld.pid"):
            try:
                os.kill(int((self.root / name).read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        if self._old_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = self._old_conf
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalSlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
