"""The settings table: parsing, clean errors for bad values, and the page that documents it."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from air_skills import settings
from air_skills.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("air_skills", "autoresearch", "mcp_server")
PAGE = ROOT / "docs" / "configuration.md"
AIR = shutil.which("air") or str(Path(sys.executable).parent / "air")
NAME_RE = re.compile(r"\bAIR_[A-Z][A-Z0-9_]*\b")

# Variables still read directly somewhere (being converted to settings.get); only shrinks.
NOT_YET_CONVERTED: set[str] = set()
# Modules that run inside a job, stdlib only (no toolkit import cost there), and read only what
# the job receives (settings.JOB_ENV) straight from its environment.
JOB_SIDE = {Path("air_skills") / "job.py"}


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _direct_reads(path: Path) -> list[tuple[int, str]]:
    """(line, variable) of each os.environ / os.getenv read of an AIR_* variable."""
    tree = ast.parse(path.read_text(), str(path))
    names = {  # module constants such as FAULTS_ENV = "AIR_SIMULATED_GPU_FAULTS"
        t.id: node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for t in node.targets
        if isinstance(t, ast.Name) and isinstance(node.value.value, str)
    }

    def air_name(key: ast.AST) -> str | None:
        value = key.value if isinstance(key, ast.Constant) else names.get(getattr(key, "id", ""))
        return value if isinstance(value, str) and value.startswith("AIR_") else None

    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )

    reads = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "pop") and is_environ(f.value):
                key = node.args[0]
            elif (
                isinstance(f, ast.Attribute | ast.Name)
                and getattr(f, "attr", getattr(f, "id", "")) == "getenv"
            ):
                key = node.args[0]
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and is_environ(node.value)
        ):
            key = node.slice
        if key is not None and (name := air_name(key)):
            reads.append((node.lineno, name))
    return reads


def test_page_is_generated_from_the_table() -> None:
    assert PAGE.read_text() == settings.markdown_page(), (
        "docs/configuration.md is stale: python -m air_skills.settings > docs/configuration.md"
    )


def test_every_variable_the_code_names_is_on_the_page() -> None:
    listed = set(NAME_RE.findall(PAGE.read_text()))
    assert set(settings.SETTINGS) | set(settings.JOB_ENV) <= listed
    missing = {
        f"{p.relative_to(ROOT)}: {name}"
        for p in _sources()
        for name in NAME_RE.findall(p.read_text())
        if name not in listed
    }
    assert not missing, "add these to air_skills/settings.py (and regenerate the page)"


def test_no_module_but_settings_reads_air_variables() -> None:
    found = {
        f"{p.relative_to(ROOT)}:{line} {name}": name
        for p in _sources()
        if p != ROOT / "air_skills" / "settings.py"
        for line, name in _direct_reads(p)
        if not (p.relative_to(ROOT) in JOB_SIDE and name in settings.JOB_ENV)
    }
    unexpected = sorted(where for where, name in found.items() if name not in NOT_YET_CONVERTED)
    assert not unexpected, "read these through air_skills.settings.get"
    converted = NOT_YET_CONVERTED - set(found.values())
    assert not converted, f"converted: drop {converted} from NOT_YET_CONVERTED"


def test_the_scanner_sees_every_form_of_read(tmp_path: Path) -> None:
    code = tmp_path / "m.py"
    code.write_text(
        "import os\nfrom os import environ, getenv\nX_ENV = 'AIR_X'\n"
        "a = os.environ.get('AIR_A')\nb = os.environ['AIR_B']\nc = os.getenv('AIR_C')\n"
        "d = environ.get(X_ENV)\ne = getenv('AIR_E', '1')\n"
        "env = {}\nenv['AIR_JOB_ID'] = '1'\nos.environ['AIR_W'] = '2'\nf = os.environ.get('HOME')\n"
    )
    assert [n for _, n in sorted(_direct_reads(code))] == [
        "AIR_A",
        "AIR_B",
        "AIR_C",
        "AIR_X",
        "AIR_E",
    ]


# --- parsing ---------------------------------------------------------------------------------


def test_defaults_when_unset_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIR_GRACE_S", raising=False)
    assert settings.get("AIR_GRACE_S") == 10.0
    monkeypatch.setenv("AIR_MAX_INFRA_RETRIES", "  ")
    assert settings.get("AIR_MAX_INFRA_RETRIES") == 3
    monkeypatch.delenv("AIR_PROJECT", raising=False)
    assert settings.get("AIR_PROJECT") is None


def test_values_are_parsed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIR_GRACE_S", "2.5")
    monkeypatch.setenv("AIR_BYPASS_JOBS", " 4 ")
    monkeypatch.setenv("AIR_HOME", str(tmp_path))
    assert settings.get("AIR_GRACE_S") == 2.5
    assert settings.get("AIR_BYPASS_JOBS") == 4
    assert settings.get("AIR_HOME") == tmp_path


@pytest.mark.parametrize(
    ("name", "value", "form"),
    [
        ("AIR_MAX_INFRA_RETRIES", "three", "a whole number >= 0"),
        ("AIR_STARVATION_S", "soon", "a number of seconds >= 0"),
        ("AIR_HEALTH_INTERVAL_S", "0", "a number of seconds > 0"),
        ("AIR_GRACE_S", "-1", "a number of seconds >= 0"),
        ("AIR_BYPASS_JOBS", "1.5", "a whole number >= 0"),
        ("AIR_SUPERVISOR_LINGER_S", "nan", "a number of seconds >= 0"),
    ],
)
def test_bad_value_is_a_clean_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, form: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInput) as exc:
        settings.get(name)
    assert exc.value.message == f"{name}={value!r} is not {form}"
    assert name in exc.value.hint and exc.value.context["variable"] == name
    with pytest.raises(InvalidInput):
        settings.check_all()


def test_lenient_settings_fall_back_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_GPU_MAX_TEMP_C", "hot")
    monkeypatch.setenv("AIR_CPU_SLOTS", "0")
    assert settings.get("AIR_GPU_MAX_TEMP_C") == 90.0
    assert settings.get("AIR_CPU_SLOTS") is None
    assert settings.problem("AIR_GPU_MAX_TEMP_C") == (
        "AIR_GPU_MAX_TEMP_C='hot' is not a temperature 20-150 °C"
    )
    settings.check_all()  # lenient ones are reported where they are used


def test_check_all_names_every_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIR_GRACE_S", "x")
    monkeypatch.setenv("AIR_STARVATION_S", "y")
    with pytest.raises(InvalidInput) as exc:
        settings.check_all()
    assert "AIR_GRACE_S='x'" in exc.value.message and "AIR_STARVATION_S='y'" in exc.value.message


def test_unknown_name_is_a_programming_error() -> None:
    with pytest.raises(KeyError, match="AIR_NOPE"):
        settings.get("AIR_NOPE")


# --- through the real `air` --------------------------------------------------------------------


def _air(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIR, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_air_with_a_bad_variable_exits_2_without_traceback(air_home: Path) -> None:
    proc = _air("ls", AIR_MAX_INFRA_RETRIES="three")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(
        "[invalid-input] AIR_MAX_INFRA_RETRIES='three' is not a whole number >= 0"
    )
    assert "Next: set AIR_MAX_INFRA_RETRIES" in proc.stderr and "Traceback" not in proc.stderr
    proc = _air("launch", "--json", "--", "true", AIR_STARVATION_S="soon")
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid-input" and "AIR_STARVATION_S='soon'" in error["message"]
    assert "Traceback" not in proc.stderr
    assert json.loads(_air("ls", "--json").stdout) == []  # nothing was launched
