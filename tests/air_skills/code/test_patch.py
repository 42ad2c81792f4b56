"""The pure-Python unified-diff applier: clean applies, offsets, and every refusal."""

from __future__ import annotations

import pytest

from air_skills.errors import InvalidSpec
from air_skills.runtime.code.patch import apply_patch, check_path

FILES = {
    "train.py": b"import model\nlr = 0.1\nepochs = 3\nprint(lr, epochs)\n",
    "model.py": b"def f():\n    return 1\n",
}


def read(path: str) -> bytes | None:
    return FILES.get(path)


GIT_PATCH = """diff --git a/train.py b/train.py
index 1111111..2222222 100644
--- a/train.py
+++ b/train.py
@@ -1,4 +1,4 @@
 import model
-lr = 0.1
+lr = 0.01
 epochs = 3
 print(lr, epochs)
"""


def test_git_patch_applies_in_memory() -> None:
    out = apply_patch(GIT_PATCH, read)
    assert out == {"train.py": b"import model\nlr = 0.01\nepochs = 3\nprint(lr, epochs)\n"}
    assert FILES["train.py"].startswith(b"import model\nlr = 0.1\n")  # nothing written


def test_new_deleted_and_shifted_hunks() -> None:
    patch = """--- /dev/null
+++ b/new.py
@@ -0,0 +1,2 @@
+a = 1
+b = 2
--- a/model.py
+++ /dev/null
@@ -1,2 +0,0 @@
-def f():
-    return 1
--- train.py\t2024-01-01 00:00:00
+++ train.py\t2024-01-01 00:00:01
@@ -7,2 +7,3 @@
 epochs = 3
+epochs += 1
 print(lr, epochs)
"""
    out = apply_patch(patch, read)
    assert out["new.py"] == b"a = 1\nb = 2\n"
    assert out["model.py"] is None
    assert out["train.py"].endswith(b"epochs = 3\nepochs += 1\nprint(lr, epochs)\n")


def test_no_newline_at_end_of_file() -> None:
    patch = """--- a/model.py
+++ b/model.py
@@ -1,2 +1,2 @@
 def f():
-    return 1
+    return 2
\\ No newline at end of file
"""
    assert apply_patch(patch, read)["model.py"] == b"def f():\n    return 2"


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("just some text\n", "empty"),
        (GIT_PATCH.replace("-lr = 0.1", "-lr = 0.5"), "train.py, hunk 1"),
        (GIT_PATCH.replace("a/train.py", "a/../etc/passwd"), "leaves the tree"),
        (GIT_PATCH.replace("--- a/train.py", "--- /abs/train.py"), "absolute"),
        (GIT_PATCH.replace("a/train.py", "a/missing.py"), "missing.py: no such file"),
        ("diff --git a/x.bin b/x.bin\nBinary files a/x.bin and b/x.bin differ\n", "binary"),
        ("diff --git a/x b/x\nGIT binary patch\nliteral 1\n", "binary"),
        (GIT_PATCH + "\x00", "NUL"),
        (GIT_PATCH.replace("@@ -1,4 +1,4 @@", "@@ -1,9 +1,9 @@"), "cut short"),
        ("--- /dev/null\n+++ b/train.py\n@@ -0,0 +1 @@\n+x\n", "has it already"),
    ],
)
def test_refusals_name_the_file_and_hunk(patch: str, words: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        apply_patch(patch, read)
    assert words in str(err.value)
    assert err.value.message.startswith("patch refused, nothing was launched")


def test_second_hunk_failure_is_numbered() -> None:
    patch = GIT_PATCH + "@@ -3,1 +3,1 @@\n-epochs = 9\n+epochs = 4\n"
    with pytest.raises(InvalidSpec, match=r"train.py, hunk 2 \(@@ -3,1 \+3,1 @@\)"):
        apply_patch(patch, read)


def test_binary_target_is_refused() -> None:
    patch = "--- a/w.bin\n+++ b/w.bin\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(InvalidSpec, match="binary file"):
        apply_patch(patch, {"w.bin": b"a\x00\n"}.get)


def test_check_path() -> None:
    assert check_path("./src/x.py") == "src/x.py"
    for bad in ("../x", "a/../../x", "/etc/x", "C:/x", ".git/config"):
        with pytest.raises(InvalidSpec):
            check_path(bad)
