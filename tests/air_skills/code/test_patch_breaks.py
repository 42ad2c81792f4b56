"""Issue 30's patch breaks: patches the checker passed that crashed `air launch`, a rename onto
an existing file, and a hunk that took minutes to not match a big file."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills import Client
from air_skills.errors import InvalidSpec
from air_skills.runtime.code.patch import apply_patch

PY = sys.executable
AIR = str(Path(PY).parent / "air")


def tree(root: Path) -> Path:
    """A plain folder: a package, an in-tree symlink to it, and a top-level script."""
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "t.py").write_text("T = 1\n")
    (root / "sub").mkdir()
    (root / "sub" / "a.py").write_text("A = 1\n")
    os.symlink("pkg", root / "lnk")
    return root


def new_file(path: str, text: str = "Y = 2\n") -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}"


def air_launch(root: Path, patch: str, *extra: str) -> subprocess.CompletedProcess[str]:
    (root.parent / "p.diff").write_text(patch)
    cmd = [AIR, "launch", "--json", "--patch", str(root.parent / "p.diff"), *extra]
    cmd += ["--", PY, "-c", "pass"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=root)


@pytest.mark.parametrize(
    "patch, words",
    [
        (new_file("lnk/new.py"), "lnk is a symlink in the snapshot"),
        (new_file("pkg"), "pkg is a folder in the snapshot"),
        (new_file("t.py/x.py"), "t.py is a file in the snapshot"),
    ],
    ids=["through-folder-symlink", "file-over-folder", "file-under-file"],
)
def test_air_launch_refuses_what_the_tree_cannot_hold(
    air_home: Path, tmp_path: Path, patch: str, words: str
) -> None:
    root = tree(tmp_path / "tree")
    for extra in (("--dry-run",), ()):
        done = air_launch(root, patch, *extra)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        err = json.loads(done.stdout or done.stderr)["error"]
        assert err["code"] == "invalid-spec" and words in err["message"], err
    assert not list((air_home / "jobs").glob("*/code.json"))  # nothing was launched


def test_client_launch_refuses_a_file_through_a_symlink(client: Client, tmp_path: Path) -> None:
    root = tree(tmp_path / "tree")
    spec = {"command": [PY, "-c", "pass"], "workdir": str(root), "track": False}
    with pytest.raises(InvalidSpec, match="lnk is a symlink"):
        client.launch({**spec, "patch": new_file("lnk/new.py")})
    assert list(client.list().items) == []
    # a real folder under the tree still takes a new file
    info = client.launch({**spec, "patch": new_file("pkg/new.py")})
    assert (client.home / "jobs" / info.job_id / "code" / "pkg" / "new.py").read_text() == "Y = 2\n"


RENAME = """diff --git a/sub/a.py b/t.py
similarity index 80%
rename from sub/a.py
rename to t.py
--- a/sub/a.py
+++ b/t.py
@@ -1 +1 @@
-A = 1
+A = 2
"""


def test_a_rename_onto_an_existing_file_is_refused_as_git_apply_does() -> None:
    files = {"sub/a.py": b"A = 1\n", "t.py": b"T = 1\n"}
    with pytest.raises(InvalidSpec, match="renames a file onto one the snapshot has") as got:
        apply_patch(RENAME, files.get)
    assert got.value.context["file"] == "t.py"
    # onto a free name it applies; after deleting the target in the same patch too
    assert apply_patch(RENAME, {"sub/a.py": b"A = 1\n"}.get) == {
        "sub/a.py": None,
        "t.py": b"A = 2\n",
    }
    delete_first = "--- a/t.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-T = 1\n" + RENAME
    assert apply_patch(delete_first, files.get)["t.py"] == b"A = 2\n"


def _big_case(tmp_path: Path) -> tuple[Path, str]:
    """The red team's case: a 1,000,000-line file of one repeated line, and a 35 KB patch whose
    one hunk removes 5,000 lines that match everywhere but at the last (the old matcher
    compared ~5,000 lines at each of a million places: 180 s)."""
    root = tmp_path / "big"
    root.mkdir()
    (root / "big.py").write_text("x = 2\n" + "x = 1\n" * 999_999)
    removed = "-x = 1\n" * 4999 + "-x = 2\n"
    patch = f"--- a/big.py\n+++ b/big.py\n@@ -1,5000 +1,0 @@\n{removed}"
    assert len(removed) == 35_000
    return root, patch


@pytest.mark.timeout(120)  # a bound, not a measured time: it took 180 s before, 3 s after
def test_a_big_hunk_on_a_million_lines_ends_with_its_reason(air_home: Path, tmp_path: Path) -> None:
    root, patch = _big_case(tmp_path)
    done = air_launch(root, patch, "--dry-run")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    err = json.loads(done.stdout or done.stderr)["error"]
    assert "big.py, hunk 1 (@@ -1,5000 +1,0 @@) does not apply" in err["message"]
    # the same hunk where it does match, far from its line number, applies
    fits = patch.replace("-x = 2\n", "-x = 1\n")
    out = apply_patch(fits, lambda p: (root / p).read_bytes())
    assert out["big.py"] == b"x = 2\n" + b"x = 1\n" * 994_999


def test_a_file_over_the_patch_limit_is_refused_naming_it(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_PATCH_MAX_FILE_MB", "1")
    root = tmp_path / "t"
    root.mkdir()
    (root / "data.py").write_text("v = 1\n" * 400_000)  # 2.4 MB
    (root / "small.py").write_text("v = 1\n")
    patch = "--- a/data.py\n+++ b/data.py\n@@ -1 +1 @@\n-v = 1\n+v = 2\n"
    spec = {"command": [PY, "-c", "pass"], "workdir": str(root), "track": False}
    with pytest.raises(InvalidSpec, match=r"data.py is 2.4 MB, over the 1 MiB a patch may change"):
        client.launch({**spec, "patch": patch}, dry_run=True)
    small = patch.replace("data.py", "small.py")
    assert client.launch({**spec, "patch": small}, dry_run=True).code.patched


def _plain_apply(text: str, data: bytes) -> list[str] | str:
    """The reference: each hunk tried at every place, nearest its line number first."""
    from air_skills.runtime.code.patch import parse_patch

    (fp,) = parse_patch(text)
    out = data.decode().splitlines(keepends=True)
    offset = floor = 0
    for hunk in fp.hunks:
        old, new = hunk.old(), hunk.new()
        expected = (max(hunk.old_start - 1, 0) if hunk.old_len else hunk.old_start) + offset
        if not old:
            pos: int | None = min(max(expected, floor), len(out))
        else:
            places = sorted(range(floor, len(out) - len(old) + 1),
                            key=lambda p: (abs(p - expected), p))  # fmt: skip
            pos = next((p for p in places if out[p : p + len(old)] == old), None)
        if pos is None:
            return "does not apply"
        out[pos : pos + len(old)] = new
        offset += len(new) - len(old)
        floor = pos + len(new)
    return out


def test_the_linear_matcher_finds_what_a_plain_search_finds() -> None:
    rng = random.Random(30)
    for _ in range(3000):
        lines = [f"l{rng.randint(0, 4)}\n" for _ in range(rng.randint(0, 30))]
        text = "--- a/f\n+++ b/f\n"
        for _ in range(rng.randint(1, 3)):
            body = [rng.choice(" -") + f"l{rng.randint(0, 4)}\n" for _ in range(rng.randint(0, 4))]
            adds = [f"+x{rng.randint(0, 9)}\n" for _ in range(rng.randint(0, 2))]
            kept = sum(1 for b in body if b[0] == " ") + len(adds)
            if body or adds:
                start = rng.randint(1, max(1, len(lines)))
                text += f"@@ -{start},{len(body)} +{start},{kept} @@\n" + "".join(body + adds)
        if "@@" not in text:
            continue
        data = "".join(lines).encode()
        want = _plain_apply(text, data)
        try:
            got: list[str] | str = apply_patch(text, {"f": data}.get)["f"].decode()
            want = "".join(want) if isinstance(want, list) else want
        except InvalidSpec as exc:
            got = "does not apply" if "does not apply" in exc.message else exc.message
        assert got == want, text
