"""What NVIDIA's Xid codes and clock throttle reasons mean: the tables the health checks read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class XidEntry:
    meaning: str
    critical: bool
    action: str


RESET_ADVICE = "reset the GPU (nvidia-smi -r, or reboot); if it recurs, have the GPU serviced"

# From NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors). Critical ones mean the
# hardware (or its memory, link or firmware) failed; the others are usually the job's own bug.
XID_CATALOGUE: dict[int, XidEntry] = {
    8: XidEntry("GPU stopped processing (timeout)", False, "check the job; if it recurs, reset"),
    13: XidEntry(
        "graphics engine exception (usually the application's own fault)",
        False,
        "check the job's code (out-of-range access, illegal instruction)",
    ),
    31: XidEntry(
        "GPU memory page fault (usually the application's own fault)",
        False,
        "check the job's code for illegal memory access",
    ),
    32: XidEntry(
        "invalid or corrupted push buffer stream",
        False,
        "if it recurs without a job error, check the driver and PCIe bus",
    ),
    38: XidEntry("driver firmware error", True, RESET_ADVICE),
    43: XidEntry(
        "GPU stopped processing (usually the application's own fault)",
        False,
        "check the job",
    ),
    45: XidEntry(
        "preemptive cleanup after a previous error", False, "look for an earlier Xid on this GPU"
    ),
    48: XidEntry("double-bit ECC error (uncorrectable memory error)", True, RESET_ADVICE),
    61: XidEntry("internal micro-controller breakpoint or warning", True, RESET_ADVICE),
    62: XidEntry("internal micro-controller halt", True, RESET_ADVICE),
    63: XidEntry(
        "ECC page retirement or row remapping recorded",
        True,
        "reset the GPU to apply the retirement or remapping",
    ),
    64: XidEntry(
        "ECC page retirement or row remapping failed",
        True,
        "the GPU's memory cannot be repaired in the field: have it serviced",
    ),
    69: XidEntry("graphics engine class error", False, "if it recurs, reset the GPU"),
    74: XidEntry(
        "NVLink error",
        True,
        "check the links (nvidia-smi nvlink -s), reset the GPU; if it recurs, service",
    ),
    79: XidEntry(
        "GPU has fallen off the bus",
        True,
        "reboot the node; check power and PCIe seating if it recurs",
    ),
    92: XidEntry("high single-bit ECC error rate", True, RESET_ADVICE),
    94: XidEntry(
        "contained ECC error (the application that touched the memory was stopped)",
        True,
        "reset the GPU when it is idle",
    ),
    95: XidEntry(
        "uncontained ECC error (every application on the GPU is affected)", True, RESET_ADVICE
    ),
    119: XidEntry("GSP RPC timeout", True, RESET_ADVICE + "; update the driver"),
    120: XidEntry("GSP error", True, RESET_ADVICE + "; update the driver"),
    121: XidEntry("C2C (chip-to-chip) link error", True, RESET_ADVICE),
    140: XidEntry("unrecovered ECC error", True, RESET_ADVICE),
    154: XidEntry(
        "GPU recovery action changed: a reset or reboot is required", True, "reset or reboot"
    ),
}

CRITICAL_XIDS = frozenset(code for code, e in XID_CATALOGUE.items() if e.critical)

# Clock throttle ("clocks event") reasons: bits of nvmlDeviceGetCurrentClocksThrottleReasons.
THROTTLE_BITS: dict[str, int] = {
    "GPU_IDLE": 0x1,
    "APPLICATIONS_CLOCKS_SETTING": 0x2,
    "SW_POWER_CAP": 0x4,
    "HW_SLOWDOWN": 0x8,
    "SYNC_BOOST": 0x10,
    "SW_THERMAL": 0x20,
    "HW_THERMAL": 0x40,
    "HW_POWER_BRAKE": 0x80,
    "DISPLAY_CLOCK_SETTING": 0x100,
    "BOARD_LIMIT": 0x200,
    "RELIABILITY": 0x400,
}
CRITICAL_THROTTLE = ("HW_SLOWDOWN", "HW_THERMAL", "HW_POWER_BRAKE")
WARN_THROTTLE = ("SW_THERMAL",)
