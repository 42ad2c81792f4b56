"""GPU health checks without processes: NVML values translated into faults, simulated faults.

The translation is tested against pynvml's documented constants; the NVML provider's reading
code runs against a stand-in NVML library (the one thing that cannot exist here: a GPU).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from air_skills.gpu import catalogue, health, simulated
from air_skills.gpu.health import translate
from air_skills.gpu.nvml import NvmlGpuProvider
from air_skills.gpu.providers import NoGpuProvider, _nvml_provider
from air_skills.gpu.simulated import SimulatedGpuProvider
from air_skills.gpu.types import GpuReading

# --- throttle reasons ----------------------------------------------------------------------------


def test_throttle_bits_match_pynvml_constants() -> None:
    assert catalogue.THROTTLE_BITS["GPU_IDLE"] == pynvml.nvmlClocksThrottleReasonGpuIdle
    assert catalogue.THROTTLE_BITS["SW_POWER_CAP"] == pynvml.nvmlClocksThrottleReasonSwPowerCap
    assert catalogue.THROTTLE_BITS["HW_SLOWDOWN"] == pynvml.nvmlClocksThrottleReasonHwSlowdown
    assert catalogue.THROTTLE_BITS["HW_THERMAL"] == pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    assert (
        catalogue.THROTTLE_BITS["HW_POWER_BRAKE"]
        == pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown
    )
    assert catalogue.THROTTLE_BITS["SW_THERMAL"] == pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    assert catalogue.THROTTLE_BITS["HW_THERMAL"] == pynvml.nvmlClocksEventReasonHwThermalSlowdown


@pytest.mark.parametrize(
    "mask",
    [
        0,
        pynvml.nvmlClocksThrottleReasonGpuIdle,
        pynvml.nvmlClocksThrottleReasonSwPowerCap,
        pynvml.nvmlClocksThrottleReasonGpuIdle | pynvml.nvmlClocksThrottleReasonSwPowerCap,
        pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting,
        pynvml.nvmlClocksThrottleReasonSyncBoost,
    ],
)
def test_benign_throttle_reasons_are_no_fault(mask: int) -> None:
    assert health.throttle_faults(0, mask) == []


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (pynvml.nvmlClocksThrottleReasonHwSlowdown, ["HW_SLOWDOWN"]),
        (pynvml.nvmlClocksThrottleReasonHwThermalSlowdown, ["HW_THERMAL"]),
        (pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown, ["HW_POWER_BRAKE"]),
        (
            pynvml.nvmlClocksThrottleReasonHwSlowdown
            | pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
            | pynvml.nvmlClocksThrottleReasonGpuIdle,
            ["HW_SLOWDOWN", "HW_THERMAL"],
        ),
    ],
)
def test_hardware_throttle_reasons_are_critical(mask: int, names: list[str]) -> None:
    (fault,) = health.throttle_faults(3, mask)
    assert fault.critical and fault.kind == "throttle" and fault.index == 3
    assert fault.detail == "hardware clock slowdown: " + ", ".join(names)
    assert fault.data["mask"] == mask


def test_software_thermal_is_reported_not_critical() -> None:
    (fault,) = health.throttle_faults(0, pynvml.nvmlClocksThrottleReasonSwThermalSlowdown)
    assert not fault.critical
    assert "SW_THERMAL" in fault.detail


def test_throttle_names_keep_unknown_bits() -> None:
    assert health.throttle_names(0x8 | 0x10000) == ["HW_SLOWDOWN", "0x10000"]


# --- Xid, ECC, pages, remap, temperature ---------------------------------------------------------


@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 92, 94, 95])
def test_catalogued_critical_xids(code: int) -> None:
    assert code in catalogue.CRITICAL_XIDS
    (fault,) = health.xid_faults(1, [code])
    assert fault.critical and fault.kind == "xid"
    assert fault.detail.startswith(f"Xid {code}: ")
    assert catalogue.XID_CATALOGUE[code].meaning in fault.detail
    assert health.advice(fault) == catalogue.XID_CATALOGUE[code].action


def test_xid_79_means_off_the_bus() -> None:
    assert "fallen off the bus" in health.xid_faults(0, [79])[0].detail


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_application_xids_are_not_critical(code: int) -> None:
    (fault,) = health.xid_faults(0, [code])
    assert not fault.critical


def test_unknown_xid_is_reported_not_critical() -> None:
    (fault,) = health.xid_faults(0, [9999])
    assert not fault.critical and "not in AIR's catalogue" in fault.detail


def test_repeated_xids_are_counted_once() -> None:
    faults = health.xid_faults(0, [79, 79, 48])
    assert [f.data["xid"] for f in faults] == [48, 79]
    assert "Xid 79 (x2)" in faults[1].detail


def test_ecc_counter() -> None:
    assert health.ecc_faults(0, 0) == []
    assert health.ecc_faults(0, None) == []
    (fault,) = health.ecc_faults(2, 3)
    assert fault.critical and fault.kind == "ecc" and "3 uncorrectable" in fault.detail


def test_retired_pages_and_row_remap() -> None:
    assert health.retired_pages_faults(0, False) == []
    assert health.retired_pages_faults(0, True)[0].kind == "retired-pages"
    assert health.remap_faults(0, (5, 2, False, False)) == []  # remapped already: fine
    pending = health.remap_faults(0, (0, 1, True, False))
    assert [f.detail for f in pending] == ["row remapping pending (reset needed)"]
    failed = health.remap_faults(0, (0, 1, False, True))
    assert failed[0].critical and "failed" in failed[0].detail


def test_temperature_threshold() -> None:
    assert health.temperature_faults(0, 90, 90) == []
    (fault,) = health.temperature_faults(0, 91, 90)
    assert fault.critical and "91 °C" in fault.detail


def test_max_temp_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(health.MAX_TEMP_ENV, "80")
    assert health.max_temp_c() == (80.0, None)
    reading = GpuReading(0, temperature_c=85)
    assert [f.kind for f in health.faults_from_readings([reading])] == ["temperature"]
    monkeypatch.setenv(health.MAX_TEMP_ENV, "hot")
    limit, problem = health.max_temp_c()
    assert limit == health.DEFAULT_MAX_TEMP_C and problem and "'hot'" in problem
    notes = health.faults_from_readings([reading])
    assert [(f.index, f.kind, f.critical) for f in notes] == [(-1, "config", False)]


def test_translate_whole_reading() -> None:
    reading = GpuReading(
        1,
        xids=[79],
        ecc_uncorrectable=1,
        retired_pages_pending=True,
        remapped_rows=(0, 1, True, False),
        throttle_mask=pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown,
        temperature_c=95,
        errors=["cannot read ECC: Unknown Error"],
    )
    faults = translate(reading, 90)
    assert [f.kind for f in faults] == [
        "xid",
        "ecc",
        "retired-pages",
        "row-remap",
        "throttle",
        "temperature",
        "nvml-error",
    ]
    assert all(f.critical for f in faults[:-1]) and not faults[-1].critical
    assert translate(GpuReading(1, present=False), 90)[0].kind == "missing"
    assert translate(GpuReading(1), 90) == []


# --- simulated faults file -----------------------------------------------------------------------


@pytest.fixture
def faults_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "faults.json"
    monkeypatch.setenv(health.FAULTS_ENV, str(path))
    return path


def test_every_kind_can_be_simulated(faults_file: Path) -> None:
    faults_file.write_text(
        json.dumps(
            {
                "0": [{"kind": "xid", "code": 48}],
                "1": [{"kind": "ecc", "count": 2}],
                "2": [{"kind": "retired-pages"}],
                "3": [{"kind": "row-remap", "failure": True, "pending": False}],
                "4": [{"kind": "throttle", "reasons": ["HW_SLOWDOWN", "GPU_IDLE"]}],
                "5": [{"kind": "throttle", "mask": 0x80}],
                "6": [{"kind": "temperature", "celsius": 99.5}],
                "7": [{"kind": "missing"}],
                "8": [{"kind": "throttle", "reasons": ["GPU_IDLE", "SW_POWER_CAP"]}],
            }
        )
    )
    faults = SimulatedGpuProvider(9).faults(list(range(9)))
    got = {f.index: (f.kind, f.critical) for f in faults}
    assert got == {
        0: ("xid", True),
        1: ("ecc", True),
        2: ("retired-pages", True),
        3: ("row-remap", True),
        4: ("throttle", True),
        5: ("throttle", True),
        6: ("temperature", True),
        7: ("missing", True),
    }
    # the same translation as an NVML reading of the same values
    assert faults[5] == health.throttle_faults(5, 0x80)[0]


def test_faults_file_is_reread_on_every_check(faults_file: Path) -> None:
    prov = SimulatedGpuProvider(2)
    faults_file.write_text("{}")
    assert prov.faults([0, 1]) == []
    faults_file.write_text(json.dumps({"1": [{"kind": "xid", "code": 79}]}))
    assert [f.index for f in prov.faults([0, 1])] == [1]
    assert prov.faults([0]) == []


def test_after_s_counts_from_the_file_write(faults_file: Path) -> None:
    faults_file.write_text(json.dumps({"0": [{"kind": "ecc", "after_s": 60}]}))
    prov = SimulatedGpuProvider(1)
    assert prov.faults([0]) == []
    old = faults_file.stat().st_mtime - 61
    os.utime(faults_file, (old, old))
    assert [f.kind for f in prov.faults([0])] == ["ecc"]


def test_gpu_beyond_the_pool_is_missing() -> None:
    (fault,) = SimulatedGpuProvider(2).faults([5])
    assert fault.kind == "missing" and fault.critical


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "object keyed by GPU index"),
        ('{"zero": []}', "not a GPU index"),
        ('{"0": {"kind": "xid"}}', "must be a list"),
        ('{"0": ["xid"]}', "must be an object"),
        ('{"0": [{"kind": "fire"}]}', "unknown kind 'fire'"),
        ('{"0": [{"kind": "xid"}]}', "needs a code"),
        ('{"0": [{"kind": "xid", "code": "79"}]}', "code has the wrong type"),
        ('{"0": [{"kind": "xid", "code": 79, "when": 3}]}', "unknown field 'when'"),
        ('{"0": [{"kind": "ecc", "after_s": -1}]}', "after_s must be"),
        ('{"0": [{"kind": "throttle", "reasons": ["HOT"]}]}', "unknown reasons ['HOT']"),
        ('{"0": [{"kind": "throttle"}]}', "give reasons (names) or mask"),
        ('{"0": [{"kind": "temperature", "celsius": true}]}', "celsius has the wrong type"),
    ],
)
def test_bad_faults_file_is_reported_and_injects_nothing(
    faults_file: Path, content: str, expect: str
) -> None:
    faults_file.write_text(content)
    faults = SimulatedGpuProvider(2).faults([0, 1])
    assert len(faults) == 1
    (note,) = faults
    assert note.index == -1 and note.kind == "faults-file" and not note.critical
    assert expect in note.detail and health.FAULTS_ENV in note.detail
    path, problems, _ = simulated.faults_file_status()
    assert path == str(faults_file) and any(expect in p for p in problems)


def test_every_problem_is_listed_at_once(faults_file: Path) -> None:
    faults_file.write_text('{"0": [{"kind": "fire"}, {"kind": "xid"}], "x": []}')
    with pytest.raises(simulated.FaultsFileError) as info:
        simulated.load_faults_file(str(faults_file))
    assert len(info.value.problems) == 3


def test_missing_faults_file(faults_file: Path) -> None:
    (note,) = SimulatedGpuProvider(1).faults([0])
    assert note.kind == "faults-file" and "cannot read it" in note.detail


def test_deep_only_kinds_do_not_fault_the_basic_check(faults_file: Path) -> None:
    faults_file.write_text('{"0": [{"kind": "matmul-corrupt"}, {"kind": "hang"}]}')
    assert SimulatedGpuProvider(1).faults([0]) == []
    assert simulated.simulated_deep_faults(0) == {"matmul-corrupt", "hang"}


def test_simulated_reading_summary() -> None:
    (reading,) = SimulatedGpuProvider(1).readings([0])
    assert reading.temperature_c == simulated.SIMULATED_BASELINE_C
    assert "Xid" in reading.checked and "temp" in reading.checked


def test_no_gpu_provider_says_why() -> None:
    prov = NoGpuProvider("NVML unavailable (x)")
    assert prov.devices() == []
    (fault,) = prov.faults([0])
    assert fault.kind == "missing" and "NVML unavailable" in fault.detail


# --- the NVML provider against a stand-in NVML library ----------------------------------------


class FakeNvml:
    """pynvml's constants and error classes; the calls answer from a table of GPUs."""

    def __init__(self, gpus: dict[int, dict[str, Any]]) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "nvmlClocks")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.events: list[SimpleNamespace] = []
        self.registered: list[int] = []
        self.init_error: Exception | None = None

    def _gpu(self, handle: tuple[str, int]) -> dict[str, Any]:
        gpu = self.gpus[handle[1]]
        if gpu.get("lost"):
            raise pynvml.NVMLError_GpuIsLost()
        return gpu

    def _value(self, handle: tuple[str, int], key: str, default: Any) -> Any:
        value = self._gpu(handle).get(key, default)
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.00"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        if index not in self.gpus:
            raise pynvml.NVMLError_InvalidArgument()
        if self.gpus[index].get("lost_handle"):
            raise pynvml.NVMLError_GpuIsLost()
        return ("handle", index)

    def nvmlDeviceGetIndex(self, handle: tuple[str, int]) -> int:
        return handle[1]

    def nvmlDeviceGetName(self, handle: tuple[str, int]) -> bytes:
        self._gpu(handle)
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: tuple[str, int]) -> str:
        self._gpu(handle)
        return f"GPU-{handle[1]}"

    def nvmlDeviceGetMemoryInfo(self, handle: tuple[str, int]) -> SimpleNamespace:
        self._gpu(handle)
        return SimpleNamespace(total=141 * 1024**3)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int:
        assert error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        assert counter == pynvml.NVML_VOLATILE_ECC
        return self._value(handle, "ecc", 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return self._value(handle, "pages_pending", pynvml.NVMLError_NotSupported())

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return self._value(handle, "remap", (0, 0, 0, 0))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._value(handle, "throttle", pynvml.nvmlClocksThrottleReasonGpuIdle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._value(handle, "temp", 35)

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        return self._value(handle, "event_types", pynvml.nvmlEventTypeAll)

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: str) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError and event_set == "event-set"
        self.registered.append(handle[1])

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0  # a check never blocks
        if not self.events:
            raise pynvml.NVMLError_Timeout()
        return self.events.pop(0)

    def xid(self, index: int, code: int) -> None:
        self.events.append(
            SimpleNamespace(
                device=("handle", index),
                eventType=pynvml.nvmlEventTypeXidCriticalError,
                eventData=code,
            )
        )


def test_nvml_healthy_gpus() -> None:
    nv = FakeNvml({0: {}, 1: {}})
    prov = NvmlGpuProvider(nv, "NVML, driver 570.00")
    assert [d.name for d in prov.devices()] == ["NVIDIA H200", "NVIDIA H200"]
    assert prov.devices()[0].memory_mb == 141 * 1024
    assert prov.faults([0, 1]) == []
    (reading,) = prov.readings([0])
    # pages pending: not supported on this GPU (row remapping replaced it), so not checked
    assert reading.checked == ["presence", "Xid", "ECC", "row remap", "throttle", "temp"]
    assert reading.temperature_c == 35


def test_nvml_xid_events_since_the_last_check() -> None:
    nv = FakeNvml({0: {}, 1: {}})
    prov = NvmlGpuProvider(nv, "NVML")
    assert prov.faults([0, 1]) == []  # the first check registers for events
    assert sorted(nv.registered) == [0, 1]
    nv.xid(1, 79)
    nv.xid(0, 13)
    faults = prov.faults([0, 1])
    assert [(f.index, f.data["xid"], f.critical) for f in faults] == [(0, 13, False), (1, 79, True)]
    assert prov.faults([0, 1]) == []  # seen once: since the last check
    nv.xid(1, 48)
    assert prov.faults([0]) == []  # an event for another GPU waits for that GPU's check
    assert [f.data["xid"] for f in prov.faults([1])] == [48]


def test_nvml_events_not_supported() -> None:
    nv = FakeNvml({0: {"event_types": 0}})
    (reading,) = NvmlGpuProvider(nv, "NVML").readings([0])
    assert "Xid" not in reading.checked and nv.registered == []


def test_nvml_values_become_faults() -> None:
    nv = FakeNvml(
        {
            0: {"ecc": 2},
            1: {"pages_pending": 1},
            2: {"remap": (0, 3, 1, 0)},
            3: {
                "throttle": pynvml.nvmlClocksThrottleReasonHwSlowdown
                | pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown
            },
            4: {"temp": 93},
            5: {"throttle": pynvml.nvmlClocksThrottleReasonSwPowerCap},
        }
    )
    faults = NvmlGpuProvider(nv, "NVML").faults(list(range(6)))
    assert [(f.index, f.kind) for f in faults] == [
        (0, "ecc"),
        (1, "retired-pages"),
        (2, "row-remap"),
        (3, "throttle"),
        (4, "temperature"),
    ]
    assert faults[3].detail == "hardware clock slowdown: HW_SLOWDOWN, HW_POWER_BRAKE"


def test_nvml_gpu_lost_or_absent() -> None:
    nv = FakeNvml({0: {"lost": True}, 1: {"lost_handle": True}, 2: {}})
    prov = NvmlGpuProvider(nv, "NVML")
    faults = prov.faults([0, 1, 7])
    assert [(f.index, f.kind, f.critical) for f in faults] == [
        (0, "missing", True),
        (1, "missing", True),
        (7, "missing", True),
    ]
    assert "fell off the bus" in faults[0].detail and "GPU is lost" in faults[1].detail
    assert "does not see GPU 7" in faults[2].detail
    # a lost GPU still shows in the inventory, so that it cannot vanish unnoticed
    names = [d.name for d in prov.devices()]
    assert names[0].startswith("unreadable GPU") and names[2] == "NVIDIA H200"


def test_nvml_read_errors_are_reported_not_raised() -> None:
    nv = FakeNvml({0: {"ecc": pynvml.NVMLError_NoPermission(), "temp": RuntimeError("odd")}})
    prov = NvmlGpuProvider(nv, "NVML")
    notes = prov.faults([0])
    assert [(f.kind, f.critical) for f in notes] == [("nvml-error", False)] * 2
    assert "cannot read ECC: Insufficient Permissions" in notes[0].detail
    assert "cannot read temp: RuntimeError('odd')" in notes[1].detail

    # anything else: the check's own failure, as a note, never an exception
    def broken(index: int) -> None:
        raise RuntimeError("binding broke")

    nv.nvmlDeviceGetHandleByIndex = broken  # type: ignore[method-assign]
    (failure,) = prov.faults([0])
    assert failure.index == -1 and failure.kind == "check-error"
    assert "binding broke" in failure.detail


def test_nvml_missing_says_so_plainly() -> None:
    nv = FakeNvml({})
    nv.init_error = pynvml.NVMLError_LibraryNotFound()
    prov = _nvml_provider(nv)
    assert isinstance(prov, NoGpuProvider)
    assert prov.note.startswith("NVML unavailable") and "driver" in prov.note
    assert isinstance(_nvml_provider(FakeNvml({})), NoGpuProvider)  # driver, but no GPU
    assert isinstance(_nvml_provider(FakeNvml({0: {}})), NvmlGpuProvider)
