"""The agent skills: each meets the Agent Skills spec, and every command, option, MCP tool and
tool parameter a skill names exists, so the skills cannot drift from the code they teach."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from air_skills.integrations.skills import (
    MAX_BODY_LINES,
    bundled_skills,
    check_skill,
    skills_root,
    split_frontmatter,
)

REPO = Path(__file__).resolve().parents[3]
SKILLS = Path(str(skills_root()))
REQUIRED_SKILLS = {"air-launch", "air-monitor", "air-autoresearch", "air-gpu-health"}

# The contract (DESIGN.md, "MCP server air-mcp"): what the skills may name before the server
# exists; the live check below replaces it with the server's own tool list.
DESIGN_TOOLS = {
    "launch_job", "get_job", "list_jobs", "get_logs", "get_metrics", "compare_jobs",
    "wait_for_jobs", "cancel_job", "list_gpus", "start_study", "get_study", "suggest_trials",
    "stop_study", "wait_for_study", "launch_jobs", "export_code",  # third wave
    "steer_study",  # issue 39.9
}  # fmt: skip
DESIGN_AUTORESEARCH = {"run": {"--resume"}, "status": set(), "report": set(), "demo": set()}
# inline mentions that read as tool names: a verb, then what it acts on (`get_jobs`, a typo)
TOOLISH = re.compile(
    r"^(?:launch|get|list|read|compare|wait_for|cancel|start|stop|suggest|create|delete)"
    r"_[a-z_]+$"
)


# --- reading the skills ------------------------------------------------------------------------


def skill_dirs() -> list[Path]:
    return sorted(p for p in SKILLS.iterdir() if p.is_dir() and (p / "SKILL.md").exists())


def markdown_files() -> list[Path]:
    return sorted(p for d in skill_dirs() for p in d.rglob("*.md"))


def scan(path: Path) -> dict[str, list[str]]:
    """CLI command lines, MCP call lines and inline code spans of one markdown file."""
    found: dict[str, list[str]] = {"cli": [], "mcp": [], "inline": []}
    fenced = False
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            if line.startswith("MCP:"):
                found["mcp"].append(line[4:].strip())
            elif line.startswith("CLI:"):
                found["cli"].append(line[4:].strip())
            elif re.match(r"^(\$ )?(air|autoresearch) ", line):
                found["cli"].append(line.removeprefix("$ "))
            continue
        for span in re.findall(r"`([^`\n]+)`", line):
            found["inline"].append(span)
            if re.match(r"^(air|autoresearch) ", span):
                found["cli"].append(span)
    return found


def fenced_blocks(path: Path) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def cli_tree() -> dict[str, Any]:
    from air_skills.cli.app import app

    roots: dict[str, Any] = {"air": typer.main.get_command(app)}
    if importlib.util.find_spec("autoresearch.cli") is not None:
        from autoresearch.cli import app as ar_app

        roots["autoresearch"] = typer.main.get_command(ar_app)
    return roots


def check_command_line(line: str, roots: dict[str, Any]) -> list[str]:
    """Problems of one `air ...` / `autoresearch ...` line against the real command tree."""
    if line.startswith("("):  # a note such as "(none: run the CLI)"
        return []
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        return [f"{line!r}: cannot split ({exc})"]
    for i, tok in enumerate(tokens):
        if tok in ("|", "||", "&&", ";", ">", ">>"):
            tokens = tokens[:i]
            break
    program, args = tokens[0], tokens[1:]
    if program == "autoresearch" and program not in roots:
        sub = args[0] if args else ""
        if sub not in DESIGN_AUTORESEARCH:
            return [f"{line!r}: `autoresearch {sub}` is not in DESIGN.md"]
        bad = [a for a in args if a.startswith("-") and a not in DESIGN_AUTORESEARCH[sub]]
        return [f"{line!r}: option {b} of `autoresearch {sub}` not in DESIGN.md" for b in bad]
    cmd = roots[program]
    path = [program]
    while isinstance(getattr(cmd, "commands", None), dict):  # a group (typer vendors click)
        if not args or args[0].startswith("-"):
            return [f"{line!r}: `{' '.join(path)}` needs a subcommand"]
        sub = cmd.commands.get(args[0])
        if sub is None:
            return [f"{line!r}: `{' '.join(path)} {args[0]}` does not exist"]
        path.append(args.pop(0))
        cmd = sub
    options = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    problems = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-" and not re.match(r"^-\d", arg):
            name = arg.split("=", 1)[0]
            if name not in options:
                problems.append(f"{line!r}: `{' '.join(path)}` has no option {name}")
    return problems


def mcp_calls(line: str) -> list[tuple[str, list[str]]]:
    """(tool, keyword names) of an `MCP:` line such as `get_job(job_id="job-…")`."""
    if line.startswith("("):
        return []
    expr = ast.parse(line.split("  #", 1)[0].strip(), mode="eval").body
    assert isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name), line
    assert not expr.args, f"{line}: pass MCP arguments by name"
    return [(expr.func.id, [k.arg for k in expr.keywords if k.arg])]


def all_mcp_calls() -> list[tuple[str, str, list[str]]]:
    calls = []
    for md in markdown_files():
        for line in scan(md)["mcp"]:
            for tool, kwargs in mcp_calls(line):
                calls.append((f"{md.relative_to(SKILLS)}: {line}", tool, kwargs))
    return calls


def tool_mentions() -> list[tuple[str, str]]:
    """Inline mentions like `wait_for_jobs`: must name real tools too."""
    out = []
    for md in [*markdown_files(), REPO / "prompts" / "agent_research.md"]:
        for span in scan(md)["inline"]:
            if TOOLISH.match(span):
                out.append((str(md.name), span))
    return out


# --- the spec's limits -------------------------------------------------------------------------


def test_the_four_skills_are_bundled() -> None:
    assert REQUIRED_SKILLS <= set(bundled_skills())
    for name in REQUIRED_SKILLS:
        assert "SKILL.md" in bundled_skills()[name]


@pytest.mark.parametrize("name", sorted(REQUIRED_SKILLS))
def test_skill_meets_the_spec(name: str) -> None:
    assert check_skill(SKILLS / name) == []
    meta, body = split_frontmatter((SKILLS / name / "SKILL.md").read_text())
    assert meta["name"] == name
    assert len(meta["description"]) <= 1024
    assert "Use when" in meta["description"], "the description must say when to use the skill"
    assert body.count("\n") < MAX_BODY_LINES


@pytest.mark.parametrize("name", sorted(REQUIRED_SKILLS))
def test_skill_shows_mcp_and_cli_and_a_mistakes_table(name: str) -> None:
    text = (SKILLS / name / "SKILL.md").read_text()
    found = scan(SKILLS / name / "SKILL.md")
    assert len(found["mcp"]) >= 3 and len(found["cli"]) >= 3
    # a step is a fenced block: one that shows the MCP form shows the CLI form too
    for block in fenced_blocks(SKILLS / name / "SKILL.md"):
        has_mcp = any(line.startswith("MCP:") for line in block)
        has_cli = any(line.startswith("CLI:") for line in block)
        assert has_mcp == has_cli, f"{name}: a step without both MCP: and CLI: forms: {block}"
    section = text.split("## Common agent mistakes", 1)
    assert len(section) == 2, "needs a '## Common agent mistakes' section"
    rows = [r for r in section[1].splitlines() if r.startswith("|")]
    assert rows[0].lower().startswith("| mistake")
    assert len(rows) - 2 >= 6, "the mistakes table needs at least six rows"


def write_skill(root: Path, folder: str, text: str, refs: dict[str, str] | None = None) -> Path:
    d = root / folder
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(text)
    for rel, content in (refs or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(content)
    return d


GOOD_BODY = "# Title\n\nSee [details](references/more.md).\n"


def good(name: str = "my-skill", description: str = "Does X. Use when Y.", extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{GOOD_BODY}"


@pytest.mark.parametrize(
    "folder, text, refs, expected",
    [
        ("Bad-Name", good("Bad-Name"), None, "lowercase"),
        ("bad_name", good("bad_name"), None, "lowercase"),
        ("-lead", good("-lead"), None, "hyphen"),
        ("double--hyphen", good("double--hyphen"), None, "hyphen"),
        ("a" * 65, good("a" * 65), None, "65 characters"),
        ("other", good("my-skill"), None, "differs from its folder"),
        ("my-skill", good(description="x" * 1025), None, "1025 characters"),
        ("my-skill", "---\nname: my-skill\n---\nbody\n", None, "'description' is required"),
        ("my-skill", "---\ndescription: d\n---\nbody\n", None, "'name' is required"),
        ("my-skill", "# no frontmatter\n", None, "must start with a '---'"),
        ("my-skill", "---\nname: my-skill\ndescription: d\n", None, "not closed"),
        ("my-skill", "---\nname: [unclosed\n---\nbody\n", None, "not valid YAML"),
        ("my-skill", good(extra="version: 2\n"), None, "unknown frontmatter field 'version'"),
        ("my-skill", good(extra="compatibility: ''\n"), None, "'compatibility'"),
        ("my-skill", good(extra="metadata: {a: 1}\n"), None, "'metadata'"),
        ("my-skill", good() + "line\n" * 500, None, "keep it under 500"),
        ("my-skill", "---\nname: my-skill\ndescription: d\n---\n\n", None, "body is empty"),
        ("my-skill", good(), None, "does not exist"),  # the linked reference is missing
        ("my-skill", good(), {"references/more.md": "x", "references/deep/a.md": "x"}, "one level"),
    ],
)
def test_the_validator_refuses_bad_skills(
    tmp_path: Path, folder: str, text: str, refs: dict[str, str] | None, expected: str
) -> None:
    refs = (
        {"references/more.md": "x"} if refs is None and "does not exist" not in expected else refs
    )
    d = write_skill(tmp_path, folder, text, refs)
    problems = check_skill(d)
    assert any(expected in p for p in problems), problems


def test_the_validator_accepts_a_good_skill(tmp_path: Path) -> None:
    d = write_skill(
        tmp_path,
        "my-skill",
        good(extra="license: MIT\ncompatibility: needs python\nmetadata: {owner: me}\n"),
        {"references/more.md": "x"},
    )
    assert check_skill(d) == []
    (d / "SKILL.md").write_text(good(description="x" * 1024) + "line\n" * 490)
    assert check_skill(d) == []


def test_the_validator_reports_every_problem_at_once(tmp_path: Path) -> None:
    d = write_skill(tmp_path, "ok-name", "---\nname: Bad_Name\nextra: 1\n---\nb\n")
    problems = check_skill(d)
    assert len(problems) >= 4, problems  # unknown field, bad name, folder mismatch, description


# --- no drift: commands, options and tools named in the skills exist ---------------------------


def test_every_cli_command_and_option_in_the_skills_exists() -> None:
    roots = cli_tree()
    problems, seen = [], 0
    for md in [*markdown_files(), REPO / "prompts" / "agent_research.md"]:
        for line in scan(md)["cli"]:
            seen += 1
            problems += [f"{md.name}: {p}" for p in check_command_line(line, roots)]
    assert seen >= 40
    assert problems == []


def test_the_command_checker_catches_drift() -> None:
    roots = cli_tree()
    assert check_command_line("air launch --gpus 1 -- python t.py --lr 3", roots) == []
    assert check_command_line("air lauch --gpus 1", roots)
    assert check_command_line("air launch --gpu 1 -- python t.py", roots)
    assert check_command_line("air quota set p --gpus 2", roots) == []
    assert check_command_line("air quota sett p", roots)
    assert check_command_line("air skills install --target claude --project", roots) == []
    assert check_command_line("autoresearch run s.yaml --resume", roots) == []
    assert check_command_line("autoresearch run s.yaml --resum", roots)


def test_every_mcp_tool_in_the_skills_is_in_the_contract() -> None:
    calls = all_mcp_calls()
    assert len(calls) >= 20
    assert {tool for _, tool, _ in calls} <= DESIGN_TOOLS, sorted({t for _, t, _ in calls})
    mentions = tool_mentions()
    assert [m for m in mentions if m[1] not in DESIGN_TOOLS] == []
    # the skills between them teach every tool of the contract
    named = {tool for _, tool, _ in calls} | {m for _, m in mentions}
    assert DESIGN_TOOLS <= named, sorted(DESIGN_TOOLS - named)


def server_or_skip() -> Any:
    if importlib.util.find_spec("mcp_server.server") is None:
        pytest.skip("mcp_server.server does not exist yet: checked against DESIGN.md only")
    from mcp_server.server import build_server

    return build_server()


def live_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, dict[str, Any]]:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air_home"))
    monkeypatch.setenv("AIR_SIMULATED_GPUS", "2")
    server = server_or_skip()
    from mcp import Client

    async def listing() -> dict[str, dict[str, Any]]:
        async with Client(server) as client:
            result = await client.list_tools()
            return {t.name: t.input_schema for t in result.tools}

    return asyncio.run(listing())


def test_every_mcp_tool_and_parameter_in_the_skills_exists_on_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tools = live_tools(monkeypatch, tmp_path)
    assert DESIGN_TOOLS <= set(tools)
    problems = []
    for where, tool, kwargs in all_mcp_calls():
        if tool not in tools:
            problems.append(f"{where}: no tool {tool}")
            continue
        props = set(tools[tool].get("properties", {}))
        required = set(tools[tool].get("required", []))
        problems += [f"{where}: {tool} has no parameter {k!r}" for k in kwargs if k not in props]
        problems += [f"{where}: {tool} needs {r!r}" for r in required if r not in kwargs]
    problems += [f"{f}: no tool {m}" for f, m in tool_mentions() if m not in tools]
    assert problems == []


# --- the research prompt, the references, the plugin, the wheel ---------------------------------


def test_the_research_prompt_is_shipped_with_the_skill() -> None:
    prompt = REPO / "prompts" / "agent_research.md"
    copy = SKILLS / "air-autoresearch" / "references" / "agent-protocol.md"
    assert prompt.read_text() == copy.read_text(), "cp prompts/agent_research.md to the skill"
    text = prompt.read_text()
    for heading in (
        "## What you may change",
        "## What you must not touch",
        "## Judging a result against the noise floor",
        "## When to stop",
    ):
        assert heading in text


def test_the_xid_reference_matches_the_health_catalogue() -> None:
    from air_skills.gpu.catalogue import XID_CATALOGUE as catalogue

    text = (SKILLS / "air-gpu-health" / "references" / "xid-and-throttle.md").read_text()
    rows = re.findall(r"^\| (\d+) \| [^|]+ \| (yes|no) \|", text, re.M)
    table = {int(code): flag == "yes" for code, flag in rows}
    assert table == {code: entry.critical for code, entry in catalogue.items()}


def test_the_claude_code_plugin_bundles_the_skills_and_the_server() -> None:
    import tomllib

    plugin = json.loads((REPO / ".claude-plugin" / "plugin.json").read_text())
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", plugin["name"])
    assert plugin["version"] == project["version"]
    skills = REPO / plugin["skills"]
    assert plugin["skills"].startswith("./") and skills.resolve() == SKILLS.resolve()
    assert REQUIRED_SKILLS <= {p.name for p in skills.iterdir() if (p / "SKILL.md").exists()}
    server = plugin["mcpServers"]["air"]
    assert server["command"] in project["scripts"]  # the console script pip installs
    assert project["scripts"][server["command"]] == "mcp_server.server:main"
    entry = next(p for p in market["plugins"] if p["name"] == plugin["name"])
    assert entry["source"].startswith("./")
    assert (REPO / entry["source"] / ".claude-plugin" / "plugin.json").resolve() == (
        REPO / ".claude-plugin" / "plugin.json"
    ).resolve()
    assert market["owner"]["name"]


def test_a_wheel_ships_the_skills_and_prompts(tmp_path: Path) -> None:
    """A non-editable install must carry every skill file (package data globs)."""
    import shutil
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in ("air_skills", "autoresearch", "mcp_server", "prompts"):
        if (REPO / pkg).exists():
            shutil.copytree(REPO / pkg, src / pkg, ignore=ignore)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if out.returncode != 0 and "No module named pip" in out.stderr:
        pytest.skip("pip is not installed in this environment")
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for skill, files in bundled_skills().items():
        for rel in files:
            assert f"air_skills/skills/{skill}/{rel}" in names
    assert "prompts/agent_research.md" in names
