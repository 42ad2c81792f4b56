"""A sandboxed job's ML caches: torch hub, Hugging Face, Triton, inductor, pip, XDG in general.

Which folder: the user's (XDG_CACHE_HOME or ~/.cache, and each tool's own variable where the
launch sets one) when air runs as a user; where air runs as root the job is another uid
(sandbox.job_user) that cannot write root's caches, so the jobs share ``$AIR_HOME/cache``,
handed to that uid (AIR_SANDBOX_CACHE names another). The job's variables point into it.

Trust follows the code: a job that runs the user's own code (a plain launch, a config study)
shares them read-write, so what one downloads the next finds; a code-editing trial (a job
with a ``patch``) and the evaluator see them read-only (a patched trial could plant compiled
code or data the next job loads) and compile into a private /tmp folder. Secrets that live
beside caches (``$HF_HOME/token``, pip's and netrc credentials) are covered by an empty file
unless the job is given them by name (a spec's ``env``: HF_TOKEN). Stdlib only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from air_skills import settings

# Each variable, and its folder under the cache root when the launch does not set it.
FOLDERS = {
    "HF_HOME": "huggingface",
    "TORCH_HOME": "torch",
    "PIP_CACHE_DIR": "pip",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
}
# Compiled code: an untrusted job compiles into a private folder, never the shared one.
COMPILED = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
PRIVATE = "/tmp/air-cache"
# Credentials beside the caches, relative to HF_HOME, or to the user's home.
HF_SECRETS = ("token", "stored_tokens")
HOME_SECRETS = (".netrc", ".pypirc", ".huggingface/token", ".config/pip", ".pip")
EMPTY = "sandbox-empty"  # under AIR_HOME: the empty file laid over a secret

Mount = tuple[str, str, str]


@dataclass
class Caches:
    """The mounts that give a job its caches, and the variables that point it at them."""

    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def root_folder(env: Mapping[str, str], home: str, user: tuple[int, int] | None) -> str:
    """The cache folder jobs share (see the module docstring)."""
    named = settings.get("AIR_SANDBOX_CACHE", env)
    if named:
        return os.path.realpath(os.path.expanduser(str(named)))
    if user is not None:
        return os.path.join(home, "cache")
    base = env.get("XDG_CACHE_HOME") or os.path.join(_user_home(env), ".cache")
    return os.path.realpath(base)


def _user_home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def plan(
    env: Mapping[str, str], home: str, *, trusted: bool, user: tuple[int, int] | None
) -> Caches:
    """The caches of a job whose environment is ``env`` (home: AIR_HOME's real path; user:
    the uid the job becomes, None for the caller's)."""
    out = Caches()
    root = root_folder(env, home, user)
    folders = {"XDG_CACHE_HOME": root}
    for name, sub in FOLDERS.items():
        given = env.get(name)
        real = os.path.realpath(os.path.expanduser(given)) if given else ""
        # A folder the launch names, where the job's uid may write it; else under the root.
        if real and (user is None or _owned(real, user)):
            folders[name] = real
        else:
            folders[name] = os.path.join(root, sub)
    bound: list[str] = []
    for name, real in folders.items():
        if not trusted and name in COMPILED:
            out.env[name] = f"{PRIVATE}/{FOLDERS[name]}"
            continue
        out.env[name] = real
        if trusted:
            _make(real, user, root)
        if not os.path.isdir(real) or _below(real, bound) or _unbindable(real, home):
            continue
        bound.append(real)
        out.mounts.append(("--bind" if trusted else "--ro-bind", real, real))
    # Compiled code kept by trusted jobs only; HF's datasets cache lies in HF_HOME already.
    secrets = [os.path.join(folders["HF_HOME"], n) for n in HF_SECRETS]
    secrets += [env[n] for n in ("HF_TOKEN_PATH", "PIP_CONFIG_FILE") if env.get(n)]
    secrets += [os.path.join(_user_home(env), n) for n in HOME_SECRETS]
    empty = None
    for path in dict.fromkeys(os.path.realpath(p) for p in secrets):
        if os.path.isdir(path) and not os.path.islink(path):
            out.mounts.append(("--tmpfs", "", path))
        elif os.path.isfile(path):
            empty = empty or _empty_file(home)
            if empty:
                out.mounts.append(("--ro-bind", empty, path))
    return out


def _below(real: str, bound: list[str]) -> bool:
    return any(real == b or real.startswith(b.rstrip("/") + "/") for b in bound)


def _unbindable(real: str, home: str) -> bool:
    """A folder that must not be bound: AIR_HOME itself or a folder holding it (its own
    cache folder under it is fine), or /."""
    if real == "/" or home == real or home.startswith(real.rstrip("/") + "/"):
        return True
    return False


def _owned(real: str, user: tuple[int, int]) -> bool:
    try:
        return os.stat(real).st_uid == user[0]
    except OSError:
        return False


def _make(real: str, user: tuple[int, int] | None, root: str) -> None:
    """A trusted job's cache folder, made if missing; where the job is another uid, the
    folders made for it are its own (never one that was there: a user's folder is theirs)."""
    if os.path.isdir(real):
        return
    missing = []
    here = real
    while not os.path.lexists(here) and here not in ("/", ""):
        missing.append(here)
        here = os.path.dirname(here)
    try:
        os.makedirs(real, mode=0o755, exist_ok=True)
    except OSError:
        return
    if user is None:
        return
    for folder in reversed(missing):  # made just now by air: no link can be in the way
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchown(fd, *user)
        finally:
            os.close(fd)


def _empty_file(home: str) -> str | None:
    """An empty read-only file of air's (laid over a secret): made once in AIR_HOME."""
    path = os.path.join(home, EMPTY)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))
        except FileExistsError:
            pass
        except OSError:
            return None
        st = os.lstat(path)
    except OSError:
        return None
    import stat

    if not stat.S_ISREG(st.st_mode) or st.st_size or st.st_uid != os.geteuid():
        return None
    return path
