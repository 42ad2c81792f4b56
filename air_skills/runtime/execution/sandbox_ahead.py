"""A sandbox made before its job is known: an idle supervisor's bwrap, waiting for the job.

bwrap's own start (namespaces, the base view, its two execs) is most of what a sandbox adds
to a job's launch: about 1.6 ms here, on a 10 ms launch. An idle supervisor pays it ahead:
it starts bwrap with the base every job of its kind shares (sandbox.View.base) and
sandbox_stub.py inside, which keeps CAP_SYS_ADMIN and CAP_SETPCAP (and, as root, what it
needs to become the job's uid) and the host's tree at HOST_VIEW; slirp4netns serves its
network namespace from the start (sandbox_net.py), and only a job that may use the network
takes a spare that has it (and the other way round). Handed a job whose base is the same,
the supervisor sends the job's mounts, folder, argv, environment, variables and uid; the stub
makes the mounts as bwrap would from the same view, detaches the host's tree, becomes the
job's uid, drops every capability and execs the job. The job's process
is then this bwrap's, as a job started by bwrap would be. Any other job, or a stub that
is not ready or gives up, starts the usual way (``None`` from start()).
"""

from __future__ import annotations

import marshal
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from air_skills import settings
from air_skills.runtime.execution import sandbox, sandbox_devices, sandbox_net

if TYPE_CHECKING:  # socket and select load only in a supervisor that makes a spare
    import socket

# The stub is a script run inside the sandbox (never imported here: it loads ctypes).
_STUB = str(Path(__file__).with_name("sandbox_stub.py"))
# Where the stub keeps the host's tree until the job's mounts are made (then detached).
HOST_VIEW = "/tmp/.air-host"
# The stub's process name once it waits for a job (what `ps` shows of a spare).
READY_NAME = "air-spare"


Mount = tuple[str, str, str]


class Spare:
    """One sandbox made ahead, its stub waiting on ``sock``; owned by the process that made
    it (a forked copy must not use it). ``prelude``: the mounts bwrap made in it already."""

    def __init__(
        self,
        base: tuple[str, ...],
        prelude: tuple[Mount, ...],
        child: subprocess.Popen[bytes],
        sock: socket.socket,
        network: bool = False,
    ) -> None:
        self.base = base
        self.network = network  # slirp4netns serves its namespace
        self.prelude = prelude
        self.child = child
        self.sock = sock
        self.owner = os.getpid()
        self.is_ready = False

    def ready(self) -> bool:
        """Whether the stub said it waits (``R``): never blocks."""
        if not self.is_ready and self.child.poll() is None:
            import select

            if select.select([self.sock], [], [], 0)[0]:
                self.is_ready = self.sock.recv(1) == b"R"
        return self.is_ready and self.child.poll() is None

    def left_to_mount(self, mounts: tuple[Mount, ...]) -> list[Mount]:
        """``mounts`` less those the prelude made already, where that gives the same view:
        a read-only bind of the host's own folder at its place shows the same files above
        or below another (unless the prelude's tmpfs hides it); the tmpfs over AIR_HOME
        when nothing mounted before it lies in it or over it (a bind of a folder holding
        AIR_HOME, e.g. the script's, would show the real one: air.db, every job)."""
        tmpfs = [dst for option, _src, dst in self.prelude if option == "--tmpfs"]
        out: list[Mount] = []
        for mount in mounts:
            option, _src, dst = mount
            if mount in self.prelude:
                if option == "--ro-bind" and not any(sandbox.inside(dst, t) for t in tmpfs):
                    continue
                if option == "--tmpfs" and not any(_overlap(m[2], dst) for m in out):
                    continue
            out.append(mount)
        return out

    def close(self) -> None:
        """End it: its stub reads EOF and exits, and so does bwrap."""
        self.sock.close()
        try:
            self.child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()


def _overlap(a: str, b: str) -> bool:
    return sandbox.inside(a, b) or sandbox.inside(b, a)


_SPARE: Spare | None = None
# Spares that ended unused (bwrap or the stub refused here): after this many, this process
# makes no more and its jobs start through bwrap as before.
GIVE_UP_AFTER = 3
_lost = 0


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether idle supervisors here make sandboxes ahead (AIR_SANDBOX_AHEAD, not AIR_SANDBOX
    off, and bwrap works)."""
    env = os.environ if environ is None else environ
    if settings.get("AIR_SANDBOX_AHEAD", env) == "off" or settings.get("AIR_SANDBOX", env) == "off":
        return False
    return sandbox.unavailable(env) is None


def prepare() -> None:
    """Make this process's sandbox ahead, unless it has one (an idle supervisor calls it)."""
    global _SPARE
    if _SPARE is not None and _SPARE.owner == os.getpid():
        if _SPARE.child.poll() is None:
            return
        _gone_unused(f"bwrap exited {_SPARE.child.returncode}")
    _SPARE = None
    if _lost >= GIVE_UP_AFTER or not enabled():
        return
    bwrap = sandbox.bwrap_path()
    assert bwrap is not None  # enabled() found it
    root = settings.get("AIR_SANDBOX_DEV_ROOT") or "/dev"
    base, _nodes = sandbox.base_args(
        bwrap,
        dev=sandbox_devices.dev_args([], root),
        user=sandbox.job_user(),
        tmp_size=sandbox.tmp_bytes(settings.get("AIR_JOB_DISK_GB")),  # as a job's own
        host_network=sandbox.host_network_granted(),
    )
    # What every job's view holds (sandbox.view): the interpreter and this toolkit (the
    # stub's too) where they lie under /tmp, private in there; the tmpfs over AIR_HOME.
    prelude: list[Mount] = [("--ro-bind", p, p) for p in sandbox.program_paths(sys.executable)]
    prelude.append(("--tmpfs", "", os.path.realpath(settings.get("AIR_HOME"))))
    import socket

    mine, theirs = socket.socketpair()
    slirp = None if sandbox.host_network_granted() else sandbox_net.slirp_path()
    net_fds: tuple[int, ...] = ()
    if slirp is not None:  # bwrap says its sandbox's pid; slirp4netns ends with it
        info_r, info_w = os.pipe()
        sync_r, sync_w = os.pipe()
        net_fds = (info_w, sync_w)
    argv = [
        *base[:1],
        *(["--info-fd", str(net_fds[0]), "--sync-fd", str(net_fds[1])] if net_fds else []),
        *base[1:],
        "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP",
        "--bind", "/", HOST_VIEW,
        *sandbox.mount_args(prelude),
        "--", sys.executable, "-S", "-I", _STUB, str(theirs.fileno()), HOST_VIEW, READY_NAME,
    ]  # fmt: skip
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # its stderr is ours: bwrap's complaints go to our log
            process_group=0,
            close_fds=True,
            pass_fds=(theirs.fileno(), *net_fds),
            env={"PATH": os.environ.get("PATH", os.defpath)},
        )
    except OSError:
        mine.close()
        if net_fds:
            os.close(info_r)
            os.close(sync_r)
        return
    finally:
        theirs.close()
        for fd in net_fds:
            os.close(fd)
    network = False
    if slirp is not None:
        try:
            why = sandbox_net.attach(sandbox_net.sandbox_pid(info_r), slirp, sync_r)
        except OSError as exc:
            why = str(exc)
        finally:
            os.close(info_r)
            os.close(sync_r)
        network = why is None
    _SPARE = Spare(base, tuple(prelude), child, mine, network)


def start(
    view: sandbox.View, argv: list[str], env: dict[str, str], log_fd: int
) -> subprocess.Popen[bytes] | None:
    """Start ``argv`` in this process's sandbox made ahead, if its base is ``view``'s and it
    is ready: the running bwrap, as Popen would have given it. ``None``: start it the usual
    way (the spare, if it gave up, is gone; one not used stays for the next job)."""
    global _SPARE
    spare = _SPARE
    if spare is None or spare.owner != os.getpid() or spare.base != view.base:
        return None
    if spare.network != (view.network and sandbox_net.slirp_path(env) is not None):
        return None
    if not spare.ready():
        return None
    _SPARE = None
    mounts = spare.left_to_mount(view.mounts)
    job = {
        "mounts": mounts,
        "chdir": view.chdir,
        "argv": argv,
        "env": {**env, **dict(view.env)},
        "user": list(view.user) if view.user is not None else None,
    }
    payload = marshal.dumps(job)
    import socket

    try:
        spare.sock.settimeout(10)
        socket.send_fds(spare.sock, [struct.pack("!Q", len(payload))], [log_fd])
        spare.sock.sendall(payload)
        said = spare.sock.recv(4096)
    except OSError:
        said = b""
    if said[:1] != b"X":
        spare.close()
        _gone_unused(said[1:].decode(errors="replace") if said[:1] == b"E" else "no answer")
        return None
    spare.sock.close()  # nothing more to say: the job cannot reach this process through it
    return spare.child


def _gone_unused(why: str) -> None:
    """A spare ended without its job (which starts through bwrap): said in this process's
    log; after GIVE_UP_AFTER of them, no more spares here."""
    global _lost
    _lost += 1
    last = " (no more here: jobs start through bwrap)" if _lost >= GIVE_UP_AFTER else ""
    print(f"[air] a sandbox made ahead ended unused: {why}{last}", file=sys.stderr, flush=True)


def pids() -> list[int]:
    """This process's sandbox made ahead, as the pid of its bwrap (a sweep of a job's
    leftovers must spare it); [] if none."""
    spare = _SPARE
    if spare is None or spare.owner != os.getpid():
        return []
    return [spare.child.pid]


def discard() -> None:
    """End this process's sandbox made ahead (a supervisor leaving)."""
    global _SPARE
    spare, _SPARE = _SPARE, None
    if spare is not None and spare.owner == os.getpid():
        spare.close()
