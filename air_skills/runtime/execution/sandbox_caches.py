"""A sandboxed job's ML caches: torch hub, Hugging Face, Triton, inductor, pip, XDG in general.

Which folders: the user's own, as the user's tools find them: XDG_CACHE_HOME (or ~/.cache),
and each tool's variable where the launch sets one, else the tool's default (HF_HOME,
TORCH_HOME and PIP_CACHE_DIR under XDG_CACHE_HOME, Triton's ~/.triton/cache); AIR_SANDBOX_CACHE
names another root. A job reads what they hold already; its variables point at them.

Trust follows the code. A job that runs the user's own code (a plain launch, a config study)
shares them read-write, bound at their own paths: what one downloads the next finds. A folder
missing is made; where air runs as root the job is another uid (sandbox.job_user), given
write access by an ACL (sandbox_cache_acl.py); where a folder can be neither made nor shared,
the job uses ``$AIR_HOME/cache`` as before, and its log says so (``notes``). A code-editing
trial (a job with a ``patch``) and the evaluator get them read-only, and each variable points
at a private folder of their own under /tmp, seeded with links to what the user's folder
holds (``farm``): they read every entry, a new download lands in the private folder, and
nothing they write can reach the user's (a patched trial could plant compiled code or data
the next job loads). bubblewrap 0.8 has no overlay: this is one made of links.

Secrets that live beside the caches (``$HF_HOME/token``, ``stored_tokens``, pip's and netrc
credentials) are covered by an empty file, never linked and never shared; a job that needs a
token is given it by name (a spec's ``env``: HF_TOKEN). Stdlib only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from air_skills import settings
from air_skills.runtime.execution import sandbox_cache_acl

# Each variable, and its folder under the cache root when the launch does not set it.
FOLDERS = {
    "HF_HOME": "huggingface",
    "TORCH_HOME": "torch",
    "PIP_CACHE_DIR": "pip",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
}
# Folders a job gets only where the launch names them (else they lie in HF_HOME).
NAMED_ONLY = {"HF_HUB_CACHE": "huggingface-hub", "HF_DATASETS_CACHE": "huggingface-datasets"}
PRIVATE = "/tmp/air-cache"  # an untrusted job's own caches, in its private /tmp
PRIVATE_MODE = "0777"  # its folders there: the job's uid writes them (nobody else is there)
FARM_MAX = 2048  # links and folders seeded per job; a folder past it is one read-only link
# Credentials beside the caches, relative to HF_HOME, or to the user's home.
HF_SECRETS = ("token", "stored_tokens")
HOME_SECRETS = (".netrc", ".pypirc", ".huggingface/token", ".config/pip", ".pip")
EMPTY = "sandbox-empty"  # under AIR_HOME: the empty file laid over a secret
OWN = "air-skills"  # air's own cache under XDG_CACHE_HOME (sandbox_probe.py): never shared

Mount = tuple[str, str, str]


@dataclass
class Caches:
    """The mounts that give a job its caches, the variables that point it at them, the
    private folders seeded with links (made after every other mount: ``farm``), and what the
    job's log is told (a folder that fell back to ``$AIR_HOME/cache``)."""

    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    farm: list[Mount] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def user_folders(env: Mapping[str, str]) -> dict[str, str]:
    """Each cache variable and the user's folder for it (real paths; see the docstring)."""
    named = settings.get("AIR_SANDBOX_CACHE", env)
    base = named or env.get("XDG_CACHE_HOME") or os.path.join(_user_home(env), ".cache")
    root = os.path.realpath(os.path.expanduser(str(base)))
    out = {"XDG_CACHE_HOME": root}
    for name, sub in {**FOLDERS, **NAMED_ONLY}.items():
        given = env.get(name)
        if given:
            out[name] = os.path.realpath(os.path.expanduser(given))
        elif name == "TRITON_CACHE_DIR" and not named:  # Triton's own default
            triton_home = env.get("TRITON_HOME") or _user_home(env)
            out[name] = os.path.realpath(os.path.join(triton_home, ".triton", "cache"))
        elif name in FOLDERS:
            out[name] = os.path.join(root, sub)
    return out


def shared_with(uid: int, env: Mapping[str, str]) -> list[str]:
    """The cache folders of ``env`` (as ``user_folders``) whose ACL still names ``uid``: as
    root, those shared with a job uid before it changed (`air doctor` says so)."""
    folders = dict.fromkeys(user_folders(env).values())
    return [f for f in folders if uid in sandbox_cache_acl.named_users(f)]


def _user_home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def _private(name: str) -> str:
    return f"{PRIVATE}/{({**FOLDERS, **NAMED_ONLY}).get(name, 'xdg')}"


def plan(
    env: Mapping[str, str], home: str, *, trusted: bool, user: tuple[int, int] | None
) -> Caches:
    """The caches of a job whose environment is ``env`` (home: AIR_HOME's real path; user:
    the uid the job becomes, None for the caller's)."""
    out = Caches()
    folders = user_folders(env)
    if trusted:
        _share(folders, home, user, out)
    bound: list[str] = []
    for name, real in folders.items():
        out.env[name] = real if trusted else _private(name)
        if not os.path.isdir(real) or _below(real, bound) or _unbindable(real, home):
            continue
        bound.append(real)  # read-only, an untrusted job's links lead here
        out.mounts.append(("--bind" if trusted else "--ro-bind", real, real))
    if not trusted:
        out.farm = farm(folders, home, user)
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


def _share(folders: dict[str, str], home: str, user: tuple[int, int] | None, out: Caches) -> None:
    """Make each folder the job may write: the user's own, made if missing (as root, shared
    with the job's uid); else the jobs' cache in AIR_HOME, said in ``out.notes``."""
    for name, real in folders.items():
        why = _writable(name, real, folders, user)
        if why is None:
            continue
        sub = ({**FOLDERS, **NAMED_ONLY}).get(name)
        instead = os.path.join(home, "cache", *([sub] if sub else []))
        _make(instead, user)
        folders[name] = instead
        out.notes.append(f"sandbox caches: {name} is {instead}, not {real} ({why})")


def _writable(
    name: str, real: str, folders: Mapping[str, str], user: tuple[int, int] | None
) -> str | None:
    """None where the job can write ``real`` (made and shared now if need be), else why not."""
    try:
        os.makedirs(real, mode=0o755, exist_ok=True)
    except OSError as exc:
        return f"it cannot be made: {exc.strerror or exc}"
    if user is None:
        return None if os.access(real, os.W_OK | os.X_OK) else "the user cannot write it"
    below = [p for n, p in folders.items() if n != name and _below(p, [real])]
    try:  # XDG_CACHE_HOME and HF_HOME may hold a token later: no default entry for it there
        sandbox_cache_acl.share(
            real,
            user[0],
            inherit=name not in ("XDG_CACHE_HOME", "HF_HOME"),
            skip=[*below, os.path.join(real, OWN)],
            secrets=HF_SECRETS,
        )
    except OSError as exc:
        return f"it cannot be shared with uid {user[0]}: {exc.strerror or exc}"
    return None


def farm(folders: Mapping[str, str], home: str, user: tuple[int, int] | None) -> list[Mount]:
    """An untrusted job's private caches: a writable folder per variable under PRIVATE,
    holding a link to each entry of the user's folder (``--symlink``; a folder as a writable
    folder of links in turn, breadth first, while FARM_MAX lasts), never a secret. Lock files
    are left out: a tool makes its own; so is AIR_HOME, where a cache folder holds it."""
    out: list[Mount] = [("--dir", PRIVATE_MODE, PRIVATE)]
    left = FARM_MAX
    roots = set(folders.values())
    for name, real in folders.items():
        dst = _private(name)
        out.append(("--dir", PRIVATE_MODE, dst))
        queue = [(dst, _listing(real, user))]
        while queue:
            to, entries = queue.pop(0)
            for entry in entries or []:
                if entry.name in HF_SECRETS or entry.name == OWN or entry.name.endswith(".lock"):
                    continue
                here = f"{to}/{entry.name}"
                if _unbindable(entry.path, home) or _below(entry.path, [home]):
                    continue  # AIR_HOME: hidden from every job
                if entry.name == ".locks":
                    out.append(("--dir", PRIVATE_MODE, here))
                    continue
                if entry.is_symlink():  # as it is: HF's snapshots link to ../../blobs
                    out.append(("--symlink", os.readlink(entry.path), here))
                    continue
                inner = None
                if entry.is_dir(follow_symlinks=False) and entry.path not in roots:
                    inner = _listing(entry.path, user)
                if inner is not None and len(inner) <= left:
                    left -= len(inner)
                    out.append(("--dir", PRIVATE_MODE, here))
                    queue.append((here, inner))
                else:
                    out.append(("--symlink", entry.path, here))
    return out


def _listing(folder: str, user: tuple[int, int] | None) -> list[os.DirEntry[str]] | None:
    """What ``folder`` holds, where the job's uid could list it itself; None if not."""
    try:
        st = os.stat(folder, follow_symlinks=False)
        if user is not None and st.st_uid != user[0] and st.st_mode & 0o005 != 0o005:
            return None
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return None


def _below(real: str, bound: list[str]) -> bool:
    return any(real == b or real.startswith(b.rstrip("/") + "/") for b in bound)


def _unbindable(real: str, home: str) -> bool:
    """A folder that must not be bound: AIR_HOME itself or a folder holding it (its own
    cache folder under it is fine), or /."""
    if real == "/" or home == real or home.startswith(real.rstrip("/") + "/"):
        return True
    return False


def _make(real: str, user: tuple[int, int] | None) -> None:
    """A folder of the jobs' cache in AIR_HOME, made if missing; where the job is another uid,
    the folders made for it are its own (never one that was there)."""
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
