"""A sandboxed job's network: a namespace of its own, outbound through slirp4netns.

Every sandbox has its own network namespace (sandbox.base_args: ``--unshare-net``), so the
host's loopback services (the page, air-mcp over HTTP, MLflow's server, a Ray head) are not
there to call. A job that may use the network (``network: true``, the default) gets a
user-mode stack in it: slirp4netns, attached to the sandbox before the job runs (bwrap's
``--block-fd``), with ``--disable-host-loopback`` (10.0.2.2 does not lead to the host's
127.0.0.1). It ends with the sandbox (its ``--exit-fd`` is bwrap's ``--sync-fd``). Where
slirp4netns is missing (AIR_SLIRP4NETNS), a job has loopback only and its log says so.
``network: false``: loopback only. Stdlib only.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Mapping
from typing import IO, Any

from air_skills import settings

MTU = "65520"
WAIT_S = 10.0  # bwrap's word of its sandbox's pid, then slirp4netns's ready


def slirp_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The slirp4netns that AIR_SLIRP4NETNS names, on PATH (or /usr/bin); None if missing."""
    env = os.environ if environ is None else environ
    name = settings.get("AIR_SLIRP4NETNS", env) or ""
    if not name:
        return None
    path = env.get("PATH", os.defpath) + ":/usr/bin:/bin"
    return shutil.which(name, path=path)


def missing_note(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    name = settings.get("AIR_SLIRP4NETNS", env) or "slirp4netns"
    return (
        f"[air] no network for this job: {name} not found (its sandbox has loopback only;"
        " apt-get install slirp4netns, or AIR_SLIRP4NETNS)\n"
    )


def popen(
    argv: list[str], slirp: str, log: IO[bytes] | None = None, **kw: Any
) -> subprocess.Popen[bytes]:
    """Start bwrap (``argv[0]``) holding its job until slirp4netns serves its namespace. A
    bwrap that ends before its job runs (its loopback set-up can fail under load: "loopback:
    Failed RTM_NEWADDR") is started once more, the log saying so."""
    child, ran = _popen_once(argv, slirp, log, **kw)
    if not ran:
        if log is not None:
            said = f"exit {child.wait()}"
            log.write(f"[air] the sandbox ended before its job ran ({said}): made again\n".encode())
            log.flush()
        child, _ran = _popen_once(argv, slirp, log, **kw)
    return child


def _popen_once(
    argv: list[str], slirp: str, log: IO[bytes] | None, **kw: Any
) -> tuple[subprocess.Popen[bytes], bool]:
    info_r, info_w = os.pipe()
    sync_r, sync_w = os.pipe()
    block_r, block_w = os.pipe()
    fds = (info_w, sync_w, block_r)
    full = [argv[0], "--info-fd", str(info_w), "--sync-fd", str(sync_w)]
    full += ["--block-fd", str(block_r), *argv[1:]]
    try:
        child = subprocess.Popen(full, pass_fds=(*kw.get("pass_fds", ()), *fds), **_but(kw))
    except BaseException:
        for fd in (info_r, sync_r, block_w):
            os.close(fd)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    ran = True
    try:
        try:
            why = attach(sandbox_pid(info_r), slirp, sync_r)
        except OSError as exc:
            why = f"slirp4netns could not be attached: {exc}"
        if child.poll() is not None:
            ran = False
        elif why and log is not None:
            log.write(f"[air] no network for this job: {why}\n".encode())
            log.flush()
    finally:
        os.close(info_r)
        os.close(sync_r)
        try:
            os.write(block_w, b"1")  # the job runs now
        except BrokenPipeError:
            ran = False  # bwrap ended before its job ran
        os.close(block_w)
    return child, ran


def _but(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if k != "pass_fds"}


def sandbox_pid(info_fd: int) -> int | None:
    """The pid bwrap writes to its ``--info-fd`` (its sandbox's first process); None if it
    said nothing in time."""
    got = b""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return int(json.loads(got)["child-pid"])
        except (ValueError, KeyError, TypeError):
            pass
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([info_fd], [], [], left)[0]:
            return None
        chunk = os.read(info_fd, 4096)
        if not chunk:
            return None
        got += chunk


def attach(pid: int | None, slirp: str, exit_fd: int) -> str | None:
    """slirp4netns serving the network namespace of ``pid``, until ``exit_fd`` reads EOF;
    why not (None: it is ready)."""
    if pid is None:
        return "the sandbox did not say its pid"
    _wait_for_loopback(pid)
    try:
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"its network namespace cannot be opened: {exc}"
    owner = -1
    try:
        # An unprivileged bwrap moves its sandbox into a nested user namespace once it is
        # made: slirp4netns joins the one that owns the network namespace, by descriptor.
        if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
            import fcntl

            owner = fcntl.ioctl(net, NS_GET_USERNS)
        return _attach_once(net, owner, slirp, exit_fd)
    except OSError as exc:
        return f"its network namespace cannot be joined: {exc}"
    finally:
        os.close(net)
        if owner >= 0:
            os.close(owner)


def _wait_for_loopback(pid: int, wait_s: float = 2.0) -> None:
    """Until bwrap has brought its sandbox's loopback up (lo joins the all-hosts group, in
    /proc/PID/net/igmp, once it is up: bwrap's last step of it). slirp4netns configuring the
    namespace meanwhile makes bwrap fail ("loopback: Failed RTM_NEWADDR"), one start in 40."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/net/igmp", "rb") as f:
                if b"\tlo " in f.read():
                    return
        except OSError:
            return  # gone, or no IPv4 multicast table: nothing to wait for
        time.sleep(0.0005)


NS_GET_USERNS = 0xB701  # ioctl on a namespace: its owning user namespace, as a descriptor


def _attach_once(net: int, owner: int, slirp: str, exit_fd: int) -> str | None:
    ready_r, ready_w = os.pipe()
    fds = [exit_fd, ready_w, net] + ([owner] if owner >= 0 else [])
    argv = [slirp, "--configure", f"--mtu={MTU}", "--disable-host-loopback"]
    argv += [f"--exit-fd={exit_fd}", f"--ready-fd={ready_w}", "--netns-type=path"]
    if owner >= 0:
        argv.append(f"--userns-path=/proc/self/fd/{owner}")
    argv += [f"/proc/self/fd/{net}", "tap0"]
    try:
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=fds,
            start_new_session=True,  # not in the job's group: it ends by exit_fd
            close_fds=True,
        )
    except OSError as exc:
        os.close(ready_r)
        return f"{slirp} cannot run: {exc}"
    finally:
        os.close(ready_w)
    try:
        if not select.select([ready_r], [], [], WAIT_S)[0]:
            return f"{slirp} did not get ready in {WAIT_S:g} s"
        said = os.read(ready_r, 1)
    finally:
        os.close(ready_r)
    return None if said == b"1" else f"{slirp} exited before it was ready"
