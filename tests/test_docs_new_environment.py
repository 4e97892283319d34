"""docs/new-environment.md runs as written: every ``bash`` block of the page, in order, in an empty folder.

Scaled down, and only where the page's own scale would take minutes: the scaffolded package is installed apart
(``pip install --target``, so the test session's venv is not changed); every ``skyrl-gym train`` command is run with
``--check`` exactly as printed, and the last one (the CPU variant) also for real on the tiny random Qwen2 for one
step, exporting where the page says; ``skyrl-gym eval`` then reads that export. Everything else runs verbatim.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from tests.env_packages import install_apart

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "new-environment.md"
BIN = Path(sys.executable).parent

# Appended to the page's CPU training command: the tiny random model, one step of 2 prompts x 2 samples, 4 tokens.
SCALE_DOWN = [
    "trainer.max_training_steps=1", "trainer.hf_save_interval=1", "trainer.eval_interval=1",
    "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "generator.n_samples_per_prompt=2",
    "trainer.micro_train_batch_size_per_gpu=4", "trainer.micro_forward_batch_size_per_gpu=4",
    "generator.sampling_params.max_generate_length=4", "trainer.eval_batch_size=4", "trainer.ckpt_interval=-1",
    "trainer.resume_mode=none", "trainer.logger=console", "trainer.progress_bar=false",
    "trainer.gradient_checkpointing=false", "trainer.log_path=logs", "trainer.ckpt_path=ckpts",
]


def bash_blocks(text: str) -> List[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def python_blocks(text: str) -> List[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def commands(block: str) -> List[str]:
    """The block's commands: continuation lines joined; a ``python -c "..."`` spanning lines kept whole."""
    out: List[str] = []
    pending, continued = "", False
    for line in block.splitlines():
        pending = pending + line.strip() if continued else (f"{pending}\n{line}" if pending else line)
        continued = pending.rstrip().endswith("\\")
        if continued:
            pending = pending.rstrip()[:-1].rstrip() + " "
            continue
        if pending.count('"') % 2:  # inside a multi-line quoted argument
            continue
        if pending.strip() and not pending.strip().startswith("#"):
            out.append(pending.strip())
        pending = ""
    return out


def run(command: str, env: Dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow  # 1.5 to 4 minutes on a shared 2-core machine: an install, check, conform, a training step
def test_the_new_environment_tutorial_runs_as_written(tmp_path: Path) -> None:
    from skygym_adapters.models import build_tiny_model

    tiny = build_tiny_model()
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "RAY_AUTH_MODE": "disabled"}
    page = [command for block in bash_blocks(PAGE.read_text(encoding="utf-8")) for command in commands(block)]
    trains = [c for c in page if c.startswith("skyrl-gym train")]
    assert len(trains) == 2 and "--check" in trains[0] and "--check" not in trains[1], trains
    assert any(c.startswith("skyrl-gym init ") for c in page) and any(c.startswith("skyrl-gym eval ") for c in page)
    # the game has two tries: the page's runs cap episodes at 2 turns, not at the default 1
    assert all("generator.max_turns=2" in c for c in trains), trains
    assert all("--max-turns 2" in c for c in page if c.startswith("skyrl-gym eval ")), page
    exported = None
    for command in page:
        if command.startswith("pip install -e "):
            package = re.sub(r"\[[\w,]+\]$", "", shlex.split(command)[-1])  # the folder, without [extras]
            env = install_apart(work / package, tmp_path / "site")
            env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        elif command.startswith("skyrl-gym train"):
            checked = command if "--check" in command else command.replace("skyrl-gym train", "skyrl-gym train --check", 1)
            assert "configuration is valid" in run(checked, env, work).stderr
            # the rows last the steps asked for (else training ends early and exports another global_step)
            keys = dict(re.findall(r"(trainer\.\w+)=(\S+)", command))
            train_file = work / re.search(r"data\.train_data=\"\['(.+?)'\]", command).group(1)
            rows = len(train_file.read_text(encoding="utf-8").splitlines())
            epochs = int(keys.get("trainer.epochs", 1))
            assert rows * epochs >= int(keys["trainer.max_training_steps"]) * int(keys["trainer.train_batch_size"])
            if command is trains[-1]:
                step = re.search(r"trainer\.hf_save_interval=(\d+)", command).group(1)
                export = re.search(r"trainer\.export_path=(\S+)", command).group(1)
                done = run(f"{command} {' '.join(SCALE_DOWN)} trainer.policy.model.path={tiny}", env, work)
                assert "ends every episode" not in done.stderr, done.stderr  # no warning: both tries played
                exported = (step, export)
                assert (work / export / "global_step_1" / "config.json").is_file()
        elif command.startswith("skyrl-gym eval"):
            assert exported is not None, "the page evaluates before it trains"
            step, export = exported
            assert f"--model {export}/global_step_{step} " in command + " ", "eval must read what training exported"
            scaled = command.replace(f"{export}/global_step_{step}", f"{export}/global_step_1")
            done = run(f"{scaled} --max-tokens 4 --limit 2 --no-progress", env, work)
            assert "pass@4" in done.stdout and (work / "eval_trajectories.jsonl").is_file()
        else:
            done = run(command, env, work)
            if command.startswith("skyrl-gym check "):
                assert "from the dataset builder" in done.stdout and ": OK - " in done.stdout, done.stdout
            if command.startswith("skyrl-gym conform "):
                result = next(line for line in done.stdout.splitlines() if line.startswith("result: "))
                assert "conform" in result and "MISMATCH" not in result, done.stdout  # skipped ones are named
    assert (work / "word_reverse_train.jsonl").is_file() and exported is not None


def test_the_env_with_a_tool_runs_as_written(tmp_path: Path) -> None:
    """The page's "An env with a tool" example (ToolGroup, @tool, init_tool_groups, _execute_tool), run as a
    script in an empty folder: it registers the env and plays a tool error, a tool call and the answer."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("### An env with a tool")
    section = text[start:start + 1 + re.search(r"\n##+ ", text[start + 1:]).start()]  # up to the next heading
    [example] = python_blocks(section)
    for name in ("ToolGroup", "@tool", "init_tool_groups", "_execute_tool"):
        assert name in example, name
    (tmp_path / "shop_env.py").write_text(example, encoding="utf-8")
    done = subprocess.run([sys.executable, "shop_env.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "shop env: OK"
