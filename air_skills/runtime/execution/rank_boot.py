"""A gang rank's bootstrap: note when the rank reaches the rendezvous, then run its script.

torchrun runs it by path, ``python rank_boot.py JOIN_DIR (SCRIPT | -c CODE | -m MODULE) ARGS``:
stdlib only and no air_skills import, since the rank's Python may not have the toolkit. When
the script loads ``torch.distributed``, its ``init_process_group`` is wrapped once: on entry
the rank creates ``JOIN_DIR/<RANK>`` (its mtime is the arrival), and ``JOIN_DIR/<RANK>.met``
when the call returns (the group formed), which the supervisor reads
(runtime/execution/rendezvous.py) to fail a gang whose other ranks never arrive, or arrive
and never meet (a rank that changed MASTER_PORT waits alone). A script that never
imports torch.distributed pays only this file's start. The script runs as ``__main__`` with
its own sys.argv and sys.path[0], and a traceback of it shows none of this file's frames.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys
from importlib.machinery import PathFinder
from typing import Any

_TARGET = "torch.distributed"
MET = ".met"  # JOIN_DIR/<RANK>.met: the rank's init_process_group returned


def _arrive(join_dir: str, suffix: str = "") -> None:
    """Create JOIN_DIR/<RANK><suffix> unless there (a second init keeps the first arrival)."""
    try:
        os.makedirs(join_dir, exist_ok=True)
        name = os.environ.get("RANK", "0") + suffix
        fd = os.open(os.path.join(join_dir, name), os.O_CREAT | os.O_EXCL)
        os.close(fd)
    except OSError:
        pass  # already there, or the folder is gone: the job's run is not this file's to stop


def _wrap(dist: Any, join_dir: str) -> None:
    """Wrap ``init_process_group`` in torch.distributed (and where it is defined)."""
    real = getattr(dist, "init_process_group", None)
    if real is None:  # torch built without distributed support
        return

    @functools.wraps(real)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        _arrive(join_dir)
        out = real(*args, **kwargs)
        _arrive(join_dir, MET)  # the group formed: this rank met the others
        return out

    dist.init_process_group = init_process_group
    c10d = sys.modules.get(_TARGET + ".distributed_c10d")
    if c10d is not None and getattr(c10d, "init_process_group", None) is real:
        c10d.init_process_group = init_process_group


class _Hook:
    """A meta path finder that only watches for torch.distributed, then steps aside."""

    def __init__(self, join_dir: str) -> None:
        self.join_dir = join_dir

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real_exec = loader.exec_module
        join_dir = self.join_dir

        def exec_module(module: Any) -> None:
            real_exec(module)
            _wrap(module, join_dir)

        loader.exec_module = exec_module
        return spec


def _run(argv: list[str]) -> None:
    """Run ``SCRIPT ARGS``, ``-c CODE ARGS`` or ``-m MODULE ARGS`` as Python would."""
    if argv[0] == "-c":
        import types

        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # run_module puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def main() -> None:
    join_dir, argv = sys.argv[1], sys.argv[2:]
    sys.meta_path.insert(0, _Hook(join_dir))
    try:
        _run(argv)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        # Python's own report, from the script's first frame on: as if run directly.
        tb = exc.__traceback__
        ours = (__file__, runpy.__file__, "<frozen runpy>")
        while tb is not None and tb.tb_frame.f_code.co_filename in ours:
            tb = tb.tb_next
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        sys.exit(1)


if __name__ == "__main__":
    main()
