"""The sockets a set of processes listens on, read from /proc (issue 37.14): every service the
suite starts must bind loopback only."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


def process_tree(*roots: int) -> set[int]:
    """``roots`` and every live descendant of them."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    seen: set[int] = set()
    todo = [r for r in roots if Path(f"/proc/{r}").exists()]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return seen


def _inodes(pids: set[int]) -> dict[int, int]:
    """socket inode -> the pid holding it."""
    found: dict[int, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found[int(target[8:-1])] = pid
    return found


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_addr)
    # /proc/net prints each 32-bit word in host (little-endian) order
    flipped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(flipped)


def listening(pids: set[int]) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, protocol) of every TCP socket in LISTEN and every bound UDP socket
    that ``pids`` hold."""
    inodes = _inodes(pids)
    found = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if inode not in inodes:
                continue
            if proto.startswith("tcp") and state != "0A":  # 0A: LISTEN
                continue
            addr, port = local.split(":")
            found.append((str(_address(addr)), int(port, 16), inodes[inode], proto))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def beyond_loopback(pids: set[int]) -> list[str]:
    """What ``pids`` listen on beyond loopback, with the process's name (empty: nothing)."""
    out = []
    for addr, port, pid, proto in listening(pids):
        if not is_loopback(addr):
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                name = "?"
            out.append(f"{proto} {addr}:{port} ({name}, pid {pid})")
    return out
