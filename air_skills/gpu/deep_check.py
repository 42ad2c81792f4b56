"""The deep preflight: a short torch check of GPUs (`air doctor --deep`, JobSpec.deep_preflight).

Per GPU, a matmul compared with the CPU result and a memory allocation written and read back;
for several GPUs, an all-reduce across them with torch.distributed (NCCL on GPUs, gloo on CPU
for simulated GPUs: the same code path). Each GPU is checked by its own process (one rank),
so a hung or crashing GPU is caught by a timeout instead of hanging the caller, and torch is
imported only in those processes.

Run as ``python -m air_skills.gpu.deep_check --rank R --world N ...`` by ``deep_check`` only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from air_skills import settings
from air_skills.gpu.providers import provider
from air_skills.gpu.types import GpuFault

TIMEOUT_ENV = "AIR_PREFLIGHT_TIMEOUT_S"
ALLOC_ENV = "AIR_PREFLIGHT_ALLOC_MB"
DEFAULT_TIMEOUT_S = 120.0
MATMUL_N = 512
MATMUL_TOLERANCE = 1e-3  # relative to the result's scale; fp32 is ~1e-6, garbage is ~1
NEXT_FAIL = "cordon it (`air cordon GPU --reason ...`), reset it, and run `air doctor --deep` again"


def _next_fail(gpu: int) -> str:
    return NEXT_FAIL.replace("air cordon GPU", f"air cordon {gpu}")


Result = dict[str, Any]


def _result(name: str, status: str, detail: str, next_: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "detail": detail, "next": next_, **extra}


def _env_float(name: str, default: float) -> float:
    value = settings.get(name)  # lenient: unset or bad gives the table's default (or None)
    return default if value is None else value


def deep_check(
    indices: list[int],
    *,
    device: str | None = None,
    timeout_s: float | None = None,
    alloc_mb: int | None = None,
) -> list[Result]:
    """Run the deep check on these GPUs; one result per check (name, status, detail, next).

    ``device``: ``cuda`` (NCCL) or ``cpu`` (gloo); default: cuda for NVML GPUs, cpu for
    simulated ones. Results carry ``gpu`` (an index) or ``gpus`` (for the all-reduce).
    """
    indices = list(dict.fromkeys(indices))
    if not indices:
        return [_result("deep check", "warn", "no GPUs to check (none present or all cordoned)")]
    if importlib.util.find_spec("torch") is None:
        return [
            _result(
                "deep check",
                "warn",
                "skipped: torch is not installed",
                "pip install 'air-skills[torch]' (on CPU machines: torch==2.13.0)",
            )
        ]
    if device is None:
        device = "cuda" if provider().kind == "nvml" else "cpu"
    timeout_s = timeout_s or _env_float(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
    if alloc_mb is None:
        alloc_mb = int(_env_float(ALLOC_ENV, 1024 if device == "cuda" else 16))
    with tempfile.TemporaryDirectory(prefix="air-preflight-") as tmp:
        return _run_ranks(indices, device, timeout_s, alloc_mb, Path(tmp))


def _run_ranks(
    indices: list[int], device: str, timeout_s: float, alloc_mb: int, tmp: Path
) -> list[Result]:
    world = len(indices)
    env = {
        **os.environ,
        # Rank r uses cuda:r: the r-th of these GPUs, numbered as NVML numbers them.
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in indices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    procs: list[subprocess.Popen[bytes]] = []
    for rank, gpu in enumerate(indices):
        argv = [
            sys.executable,
            "-m",
            "air_skills.gpu.deep_check",
            f"--rank={rank}",
            f"--world={world}",
            f"--gpu={gpu}",
            f"--device={device}",
            f"--dir={tmp}",
            f"--alloc-mb={alloc_mb}",
            f"--pg-timeout-s={max(5.0, timeout_s / 2)}",
        ]
        with open(tmp / f"rank{rank}.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    deadline = time.monotonic() + timeout_s
    timed_out: set[int] = set()
    for rank, p in enumerate(procs):
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out.add(rank)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    results: list[Result] = []
    collective: list[Result] = []
    for rank, (gpu, p) in enumerate(zip(indices, procs, strict=True)):
        path = tmp / f"rank{rank}.json"
        try:
            done = json.loads(path.read_text())
        except (OSError, ValueError):  # never written: the rank died or hung first
            done = {"results": []}
        local = [r for r in done["results"] if r.get("check") != "all-reduce"]
        collective.extend(r for r in done["results"] if r.get("check") == "all-reduce")
        results.extend(local)
        if rank in timed_out:
            results.append(
                _result(
                    f"gpu {gpu} deep check",
                    "fail",
                    f"did not finish within {timeout_s:g}s (a hung GPU or NCCL?)",
                    _next_fail(gpu),
                    gpu=gpu,
                    check="timeout",
                )
            )
        elif p.returncode != 0 and not done.get("finished"):
            tail = (tmp / f"rank{rank}.log").read_bytes()[-400:].decode("utf-8", "replace")
            how = f"signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
            results.append(
                _result(
                    f"gpu {gpu} deep check",
                    "fail",
                    f"the check process died ({how}): {tail.strip()[-200:]}",
                    _next_fail(gpu),
                    gpu=gpu,
                    check="crash",
                )
            )
    if world > 1:
        results.append(_merge_collective(indices, collective, timed_out))
    return results


def _merge_collective(indices: list[int], parts: list[Result], timed_out: set[int]) -> Result:
    name = "all-reduce gpus " + ",".join(map(str, indices))
    failed = [p for p in parts if p["status"] == "fail"]
    skipped = [p for p in parts if p["status"] == "warn"]
    if failed or timed_out or len(parts) < len(indices):
        why = failed[0]["detail"] if failed else "not every rank took part"
        return _result(name, "fail", why, NEXT_FAIL, gpus=indices, check="all-reduce")
    if skipped:
        return _result(name, "warn", skipped[0]["detail"], gpus=indices, check="all-reduce")
    return _result(name, "ok", parts[0]["detail"], gpus=indices, check="all-reduce")


def deep_preflight_faults(indices: list[int], log_path: str | None = None) -> list[GpuFault]:
    """The supervisor's deep preflight: critical faults for the GPUs that failed. Never raises.

    A check that could not run (torch missing, a CPU build of torch on a GPU machine) is noted
    in the job's log and is nobody's fault: the job starts.
    """
    try:
        results = deep_check(indices)
    except Exception as exc:  # the check's own failure must not cordon GPUs or stop the job
        _log(log_path, f"[air] deep preflight could not run: {exc!r}")
        return []
    faults = faults_from_results(results)
    summary = "; ".join(f"{r['name']} {r['status']} ({r['detail']})" for r in results)
    _log(log_path, f"[air] deep preflight on GPUs {indices}: {summary}")
    return faults


def faults_from_results(results: list[Result]) -> list[GpuFault]:
    """A critical fault per failed check, on its GPU (an all-reduce: on every GPU in it)."""
    faults: list[GpuFault] = []
    for r in results:
        if r["status"] != "fail":
            continue
        for gpu in [r["gpu"]] if r.get("gpu") is not None else r.get("gpus", []):
            faults.append(GpuFault(gpu, "deep-preflight", f"{r['check']}: {r['detail']}"))
    return faults


def _log(path: str | None, line: str) -> None:
    if not path:
        return
    try:
        with open(path, "a") as f:
            f.write(line + "\n")
    except OSError:
        pass


# --- one rank ----------------------------------------------------------------------------------


def _rank_main(args: argparse.Namespace) -> int:
    out_path = Path(args.dir) / f"rank{args.rank}.json"
    done: dict[str, Any] = {"gpu": args.gpu, "rank": args.rank, "results": []}

    def add(check: str, status: str, detail: str, next_: str = "") -> None:
        name = f"gpu {args.gpu} {check}" if check != "all-reduce" else check
        next_ = _next_fail(args.gpu) if next_ == NEXT_FAIL else next_
        done["results"].append(_result(name, status, detail, next_, gpu=args.gpu, check=check))
        _save(out_path, done)

    try:
        import torch
    except Exception as exc:
        add("torch", "warn", f"torch cannot be imported: {exc}", "reinstall torch")
        if args.world > 1:
            add("all-reduce", "warn", "skipped: torch cannot be imported")
        return _finish(done, out_path)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            why = f"torch {torch.__version__} sees no CUDA GPU (a CPU build?)"
            add("torch", "warn", why, "install a CUDA build of torch")
            if args.world > 1:
                add("all-reduce", "warn", "skipped: " + why)
            return _finish(done, out_path)
        dev = torch.device("cuda", args.rank)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    injected: set[str] = set()
    if args.device == "cpu":
        from air_skills.gpu.simulated import simulated_deep_faults

        injected = simulated_deep_faults(args.gpu)
    if "hang" in injected:  # simulated: a GPU that never answers
        signal.pause()
    corrupt = "matmul-corrupt" in injected
    _check_matmul(torch, dev, corrupt, add)
    _check_alloc(torch, dev, args.alloc_mb, add)
    if args.world > 1:
        _check_all_reduce(torch, dev, args, add)
    return _finish(done, out_path)


def _save(path: Path, done: dict[str, Any]) -> None:
    """Write the rank's results whole (a rank killed mid-write leaves the previous ones)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(done))
    os.replace(tmp, path)


def _finish(done: dict[str, Any], out_path: Path) -> int:
    done["finished"] = True
    _save(out_path, done)
    return 0


def _sync(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _check_matmul(torch: Any, dev: Any, corrupt: bool, add: Any) -> None:
    try:
        if dev.type == "cuda":  # compare full fp32, not TF32
            torch.backends.cuda.matmul.allow_tf32 = False
        gen = torch.Generator().manual_seed(1234)
        a = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
        b = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
        expected = a.double() @ b.double()
        start = time.perf_counter()
        got = a.to(dev) @ b.to(dev)
        _sync(torch, dev)
        ms = (time.perf_counter() - start) * 1000
        got = got.cpu().double()
        if corrupt:  # simulated: the device returns wrong numbers
            got[0, 0] += 1e3
        err = ((got - expected).abs().max() / expected.abs().max()).item()
    except Exception as exc:
        add("matmul", "fail", f"{MATMUL_N}x{MATMUL_N} matmul raised {exc!r}"[:300], NEXT_FAIL)
        return
    if err > MATMUL_TOLERANCE or err != err:
        add(
            "matmul",
            "fail",
            f"{MATMUL_N}x{MATMUL_N} fp32 matmul differs from the CPU result (rel. error {err:.3g})",
            NEXT_FAIL,
        )
    else:
        add(
            "matmul",
            "ok",
            f"{MATMUL_N}x{MATMUL_N} fp32 matches the CPU (rel. error {err:.1e},"
            f" {ms:.1f} ms on {dev}{' for a simulated GPU' if dev.type == 'cpu' else ''})",
        )


def _check_alloc(torch: Any, dev: Any, alloc_mb: int, add: Any) -> None:
    try:
        n = alloc_mb * 1024 * 1024
        start = time.perf_counter()
        buf = torch.empty(n, dtype=torch.uint8, device=dev)
        buf.fill_(0xA5)
        intact = bool((buf == 0xA5).all().item())
        _sync(torch, dev)
        ms = (time.perf_counter() - start) * 1000
        del buf
        free = ""
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            free_b, total_b = torch.cuda.mem_get_info(dev)
            free = f"; {free_b // 2**20} of {total_b // 2**20} MiB free"
    except Exception as exc:
        add("alloc", "fail", f"allocating {alloc_mb} MiB raised {exc!r}"[:300], NEXT_FAIL)
        return
    if not intact:
        add("alloc", "fail", f"{alloc_mb} MiB written and read back differ", NEXT_FAIL)
    else:
        add("alloc", "ok", f"{alloc_mb} MiB written and read back ({ms:.0f} ms){free}")


def _check_all_reduce(torch: Any, dev: Any, args: argparse.Namespace, add: Any) -> None:
    import torch.distributed as dist

    backend = "nccl" if dev.type == "cuda" else "gloo"
    try:
        start = time.perf_counter()
        dist.init_process_group(
            backend,
            init_method=f"file://{Path(args.dir) / 'rendezvous'}",
            rank=args.rank,
            world_size=args.world,
            timeout=timedelta(seconds=args.pg_timeout_s),
        )
        x = torch.full((1 << 20,), float(args.rank + 1), device=dev)
        dist.all_reduce(x)
        _sync(torch, dev)
        ms = (time.perf_counter() - start) * 1000
        want = args.world * (args.world + 1) / 2
        ok = bool(torch.all(x == want).item())
        dist.destroy_process_group()
    except Exception as exc:
        add("all-reduce", "fail", f"{backend} all-reduce raised {exc!r}"[:300], NEXT_FAIL)
        return
    if not ok:
        add("all-reduce", "fail", f"{backend} all-reduce gave a wrong sum", NEXT_FAIL)
    else:
        add("all-reduce", "ok", f"{backend}, {args.world} ranks, 4 MiB: sum correct ({ms:.0f} ms)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--gpu", type=int, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--alloc-mb", type=int, default=64)
    parser.add_argument("--pg-timeout-s", type=float, default=60.0)
    return _rank_main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
