"""The command lines: ``python -m skygym_train.entrypoints.main_base`` and ``skyrl-gym train``."""

from __future__ import annotations

import importlib.util
import signal

import pytest

from skyrl_gym.cli import main as skyrl_gym_main
from skygym_train.entrypoints.main_base import main
from tests.tiny_models import CHAT_MODEL


def test_check_and_print_config(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "hi"}], "env_class": "multiply", '
                    '"reward_spec": {"ground_truth": "6"}}\n')
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=false",
            "trainer.train_batch_size=1", "trainer.policy_mini_batch_size=1"]
    assert main(["--check", *keys]) == 0
    assert main(["--print-config", *keys, "trainer.algorithm.advantage_estimator=rloo"]) == 0
    out = capsys.readouterr().out
    assert "advantage_estimator: rloo" in out and str(data) in out


def test_check_refuses_a_model_path_that_does_not_exist(multiply_data, tmp_path, capsys):
    keys = [f"data.train_data=[{multiply_data}]", "trainer.use_ray=false"]
    assert main(["--check", *keys, f"trainer.policy.model.path={tmp_path / 'missing'}"]) == 2
    assert f"trainer.policy.model.path={tmp_path / 'missing'}: model path" in capsys.readouterr().err
    (tmp_path / "no_weights").mkdir()
    assert main(["--check", *keys, f"trainer.policy.model.path={tmp_path / 'no_weights'}"]) == 2
    assert "has no config.json with weights" in capsys.readouterr().err


def test_bad_config_exits_2_before_loading_anything(capsys):
    assert main(["trainer.train_batch_size=10", "trainer.policy_mini_batch_size=4"]) == 2
    err = capsys.readouterr().err
    assert "trainer.train_batch_size=10 is not a multiple of trainer.policy_mini_batch_size=4" in err


def test_overrides_after_an_option_and_a_broken_yaml_file_are_read_as_a_user_means(tmp_path, capsys):
    """A cold run: `train a=b --check c=d` stopped at "unrecognized arguments: c=d", and a config file that is not
    YAML printed PyYAML's 25-line traceback (exit 1)."""
    for entry in (main, lambda argv: skyrl_gym_main(["train", *argv])):
        assert entry(["trainer.epochs=1", "--check", "trainer.no_such_key=1"]) == 2
        err = capsys.readouterr().err
        assert "trainer.no_such_key: unknown key" in err and "unrecognized" not in err
    # a cold run: `train --trainer.train_batch_size=8` said only "unrecognized arguments"
    with pytest.raises(SystemExit):
        skyrl_gym_main(["train", "--check", "--trainer.train_batch_size=8"])
    assert ("unrecognized arguments: --trainer.train_batch_size=8 (config overrides take no dashes: "
            "trainer.train_batch_size=8)") in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  epochs: [1\n")
    assert main(["--config-file", str(broken), "--check"]) == 2
    err = capsys.readouterr().err
    assert f"config file {broken} is not valid YAML: while parsing" in err and "Traceback" not in err
    listed = tmp_path / "list.yaml"
    listed.write_text("- trainer.epochs=1\n")
    assert main(["--config-file", str(listed), "--check"]) == 2
    assert "must hold a mapping of keys" in capsys.readouterr().err


def test_a_resume_path_that_is_no_checkpoint_is_named_by_check(tmp_path, capsys):
    """A cold run: a missing resume_path, or the root of a run's checkpoints, passed --check and the run then
    failed on a bare `[Errno 2] ... trainer_state.pt`."""
    for step in (2, 4):
        (tmp_path / f"global_step_{step}").mkdir()
        (tmp_path / f"global_step_{step}" / "trainer_state.pt").write_bytes(b"")
    for path, said in ((tmp_path, f"did you mean {tmp_path / 'global_step_4'} (its latest)"),
                       (tmp_path / "nope", "no such folder"),
                       (tmp_path / "global_step_4", None)):
        main(["--check", "trainer.resume_mode=from_path", f"trainer.resume_path={path}"])
        err = capsys.readouterr().err
        if said is None:
            assert "trainer.resume_path" not in err, err
        else:
            assert f"trainer.resume_path={path}: " in err and said in err, err


def test_print_config_alone_prints_the_defaults(capsys):
    """`train --help` says `--print-config` shows every key; with no arguments it refused for want of the keys a
    run needs. It prints the defaults; keys it cannot read still stop it."""
    assert skyrl_gym_main(["train", "--print-config"]) == 0
    captured = capsys.readouterr()
    assert "train_batch_size: 1024" in captured.out and "advantage_estimator:" in captured.out
    assert "error" not in captured.err
    assert skyrl_gym_main(["train", "--print-config", "trainer.learning_rate=1e-5"]) == 2
    assert "did you mean trainer.policy.optimizer_config.lr" in capsys.readouterr().err


def test_skyrl_gym_train_subcommand(capsys):
    pytest.importorskip("omegaconf", reason="`skyrl-gym train` needs the 'train' extra: pip install torch==2.13.0 "
                                            "&& pip install 'skyrl-gym[train]'")
    assert skyrl_gym_main(["train", "--check", "trainer.algoritm.advantage_estimator=grpo"]) == 2
    assert "did you mean 'algorithm'" in capsys.readouterr().err


@pytest.mark.parametrize("bad, expected", [
    ("environment.env_class=multiplyy",
     "- environment.env_class=multiplyy: no env registered with id 'multiplyy'. Did you mean: 'multiply'?"),
    ("trainer.policy.model.path={missing}",
     "- trainer.policy.model.path={missing}: model path '{missing}' does not exist"),
    ("data.val_data=[{missing}]", "- data.val_data: file {missing} does not exist"),
])
def test_a_bad_env_id_model_or_data_file_is_refused_before_ray_starts(bad, expected, multiply_data, tmp_path,
                                                                      monkeypatch, capsys):
    """What needs no Ray is checked before the trainer starts it: one error line, exit status 2."""
    import ray

    from skygym_train import ray_utils

    ray_starts = []
    # a spy that starts nothing
    monkeypatch.setattr(ray_utils, "init_ray", lambda *args, **kwargs: ray_starts.append(args))
    was_up = ray.is_initialized()
    missing = tmp_path / "missing"
    keys = [f"data.train_data=[{multiply_data}]", f"trainer.policy.model.path={CHAT_MODEL}",
            "trainer.use_ray=true", "environment.env_class=multiply", bad.format(missing=missing)]
    assert skyrl_gym_main(["train", *keys]) == 2
    err = capsys.readouterr().err
    assert ray_starts == [] and ray.is_initialized() == was_up
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert error_lines == ["error: invalid trainer configuration:"]
    assert expected.format(missing=missing) in err and "Traceback" not in err, err


def test_a_rows_unknown_env_class_is_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    """The rows are read before Ray starts (the tokenizer loads beside Ray): a row's misspelt env_class costs the
    user a second, not Ray's start-up."""
    import ray

    from skygym_train import ray_utils

    ray_starts = []
    monkeypatch.setattr(ray_utils, "init_ray", lambda *args, **kwargs: ray_starts.append(args))
    was_up = ray.is_initialized()
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply"}\n'
                    '{"prompt": [{"role": "user", "content": "2 * 4"}], "env_class": "multiplyy"}\n')
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=true",
            "environment.env_class=multiply", "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2"]
    assert skyrl_gym_main(["train", *keys]) == 2
    err = capsys.readouterr().err
    assert ray_starts == [] and ray.is_initialized() == was_up
    assert f"- row 2 (line 2 of {data}): env_class=multiplyy: no env registered with id 'multiplyy'" in err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("check", [["--check"], []], ids=["check", "run"])
def test_every_mistake_is_named_in_one_run(check, tmp_path, capsys):
    """A bad setting, a model path that does not exist, a misspelt env id and a row with an unknown env_class
    are all named by one run (the user fixes them all at once, not one per try); nothing starts."""
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiplyy"}\n')
    missing = tmp_path / "missing"
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={missing}", "trainer.use_ray=false",
            "environment.env_class=gsm8kk", "trainer.epochs=0"]
    assert main([*check, *keys]) == 2
    err = capsys.readouterr().err
    assert "- trainer.epochs=0: must be a positive integer" in err
    assert f"- trainer.policy.model.path={missing}: model path '{missing}' does not exist" in err
    assert "- environment.env_class=gsm8kk: no env registered with id 'gsm8kk'. Did you mean: 'gsm8k'?" in err
    if check:  # --check reads the rows too
        assert f"- row 1 (line 1 of {data}): env_class=multiplyy: no env registered with id 'multiplyy'" in err
    assert err.count("- environment.env_class=gsm8kk") == 1 and "Traceback" not in err, err


def test_check_names_a_malformed_row_beside_the_other_problems(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": 3, "env_class": "multiply"}\n')
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={tmp_path / 'missing'}",
            "trainer.use_ray=false"]
    assert main(["--check", *keys]) == 2
    err = capsys.readouterr().err
    assert f"- row 1 (line 1 of {data}): field 'prompt' must be a non-empty list of chat messages, got 3" in err
    assert f"- trainer.policy.model.path={tmp_path / 'missing'}: model path" in err


def _spy_on_ray(monkeypatch):
    """Ray's start, recorded instead of made (a spy that starts nothing)."""
    from skygym_train import ray_utils

    starts = []
    monkeypatch.setattr(ray_utils, "init_ray", lambda *args, **kwargs: starts.append(args))
    return starts


def _multiply_rows(path, size=64):
    from skyrl_gym.data import write_jsonl
    from skyrl_gym.datasets import build_rows

    rows = list(build_rows("multiply", split="train", size=size, seed=0))
    write_jsonl(rows, path)
    return rows


@pytest.mark.parametrize("check", [["--check"], []], ids=["check", "run"])
def test_a_batch_larger_than_the_dataset_is_named_by_check_and_by_the_run(check, tmp_path, monkeypatch, capsys):
    """The default train_batch_size (1024) on 64 rows: `--check` said 'configuration is valid' and the run died
    with PromptDataset's ValueError traceback. Both now name it in the one error list (exit 2), before Ray."""
    ray_starts = _spy_on_ray(monkeypatch)
    data = tmp_path / "train.jsonl"
    _multiply_rows(data)
    keys = [f"data.train_data=['{data}']", f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=true",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}"]
    assert skyrl_gym_main(["train", *check, *keys]) == 2
    err = capsys.readouterr().err
    assert ray_starts == []
    assert [line for line in err.splitlines() if line.startswith("error:")] == ["error: invalid trainer configuration:"]
    assert ("- trainer.train_batch_size=1024 is larger than the dataset (64 rows in data.train_data); set it to 64 "
            "or fewer, or give more rows") in err
    assert "Traceback" not in err and "configuration is valid" not in err, err


@pytest.mark.parametrize("content", ["", "{\"prompt\": 3}\n"], ids=["empty", "only-bad-rows"])
def test_training_data_without_rows_is_named_as_such(content, tmp_path, capsys):
    """An empty file (or one of bad rows only) was told to set trainer.train_batch_size 'to 0 or fewer'."""
    data = tmp_path / "train.jsonl"
    data.write_text(content)
    assert main(["--check", f"data.train_data=['{data}']", f"trainer.policy.model.path={CHAT_MODEL}",
                 "trainer.use_ray=false", "trainer.train_batch_size=1", "trainer.policy_mini_batch_size=1"]) == 2
    err = capsys.readouterr().err
    assert "- data.train_data has no rows to train on" in err and "0 or fewer" not in err, err
    assert ("train.jsonl" in err) is bool(content)  # the bad row is named by its place


def test_a_refused_value_does_not_bring_problems_of_the_default_that_stood_in(tmp_path, capsys):
    """The brief's three-mistake command names its three mistakes (and the unset model) in one run, and nothing
    about the defaults that stood in for the refused values (no training files, a batch of 1024 on 64 rows)."""
    assert main(["--check", "data.train_data=x.jsonl", "trainer.train_batch_size=10",
                 "trainer.policy_mini_batch_size=4", "trainer.epochs=two"]) == 2
    listed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  - ")]
    assert listed == [
        "  - data.train_data=x.jsonl: expected a list, e.g. data.train_data=\"['x.jsonl']\" (quoted, so the shell "
        "keeps the brackets; in a config file, train_data: [x.jsonl])",
        "  - trainer.epochs=two: expected an integer",
        "  - trainer.policy.model.path: not set (a local folder, hub id or 'smollm2-135m')",
        "  - trainer.train_batch_size=10 is not a multiple of trainer.policy_mini_batch_size=4: set it to a divisor "
        "of 10, e.g. trainer.policy_mini_batch_size=2",
    ]
    data = tmp_path / "train.jsonl"
    _multiply_rows(data)
    assert main(["--check", f"data.train_data=['{data}']", f"trainer.policy.model.path={CHAT_MODEL}",
                 "trainer.use_ray=false", "trainer.train_batch_size=ten"]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == ["  - trainer.train_batch_size=ten: expected an integer"]


@pytest.mark.parametrize("check", [["--check"], []], ids=["check", "run"])
def test_rows_their_env_refuses_are_all_named_by_check_and_by_the_run(check, tmp_path, monkeypatch, capsys):
    """A row without a reward_spec passed `--check` and trained at reward 0 (one env error per sample). The env's
    own check (building it for the row) now runs on every row: each bad row is named with its place in the file and
    the env's message, beside a malformed row and a bad setting, before Ray starts."""
    import json

    ray_starts = _spy_on_ray(monkeypatch)
    data = tmp_path / "train.jsonl"
    rows = _multiply_rows(data, size=8)
    del rows[2]["reward_spec"]
    rows[4]["reward_spec"] = {"method": "rule"}
    rows[6]["prompt"] = "7 * 8"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    keys = [f"data.train_data=['{data}']", f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=true",
            "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.epochs=0",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}"]
    assert main([*check, *keys]) == 2
    assert "- trainer.epochs=0: must be a positive integer" in capsys.readouterr().err
    assert main([*check, *keys[:-2], keys[-1]]) == 2  # settings right: the rows are read by the run too
    err = capsys.readouterr().err
    assert ray_starts == [] and "Traceback" not in err, err
    listed = [line for line in err.splitlines() if line.startswith("  - ")]
    assert listed == [  # in the file's order
        f"  - row 3 (line 3 of {data}): env 'multiply': reward_spec field is required; the row has no "
        "'reward_spec' dict (expected {'ground_truth': ...})",
        f"  - row 5 (line 5 of {data}): env 'multiply': ground_truth is required in reward_spec field; "
        "reward_spec.ground_truth is missing from the row",
        f"  - row 7 (line 7 of {data}): field 'prompt' is a string; it must be a list of {{'role', 'content'}} "
        "messages",
    ], err


def test_the_validation_rows_are_checked_too_and_a_long_list_ends_in_a_count(tmp_path, capsys):
    """Held-out rows are played by evaluation: they are checked like the training rows. A file whose every row
    lacks its reward_spec is one mistake: 20 rows are named, then how many more."""
    import json

    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    _multiply_rows(train, size=8)
    rows = _multiply_rows(val, size=30)
    val.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "reward_spec"}) + "\n" for row in rows))
    keys = [f"data.train_data=['{train}']", f"data.val_data=['{val}']", f"trainer.policy.model.path={CHAT_MODEL}",
            "trainer.use_ray=false", "trainer.train_batch_size=8", "trainer.policy_mini_batch_size=8"]
    assert main(["--check", *keys]) == 2
    listed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  - ")]
    assert len(listed) == 21 and listed[0].startswith(f"  - row 1 (line 1 of {val}): env 'multiply': reward_spec")
    assert listed[19].startswith(f"  - row 20 (line 20 of {val}):")
    assert listed[20] == "  - ... and 10 more bad row(s), not listed"


def test_a_line_that_is_not_json_is_named_and_the_rows_are_not_miscounted(tmp_path, capsys):
    """A file read only up to a broken line holds more rows than were read: the batch is not compared with them."""
    data = tmp_path / "train.jsonl"
    _multiply_rows(data, size=8)
    lines = data.read_text().splitlines()
    data.write_text("\n".join(lines[:5] + ["{not json"] + lines[5:]) + "\n")
    assert main(["--check", f"data.train_data=['{data}']", f"trainer.policy.model.path={CHAT_MODEL}",
                 "trainer.use_ray=false", "trainer.train_batch_size=8", "trainer.policy_mini_batch_size=8"]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == [
        f"  - row 6 (line 6 of {data}) is not valid JSON (Expecting property name enclosed in double quotes)"]


def test_skyrl_gym_check_and_train_check_name_a_bad_row_the_same_way(tmp_path, capsys):
    """`skyrl-gym check` said "line 7" (counted from 1) and `train --check` "row 5" (from 0) of one file: both now
    name a row by its number from 1, with the file and line (a blank line makes those differ)."""
    import json

    data = tmp_path / "rows.jsonl"
    rows = _multiply_rows(data, size=2)
    data.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps({**rows[1], "prompt": "7 * 8"}) + "\n")
    named = f"row 2 (line 3 of {data}): field 'prompt' is a string"
    assert skyrl_gym_main(["check", "multiply", "--rows", str(data), "--no-adversarial", "--no-determinism"]) == 1
    assert named in capsys.readouterr().out
    assert skyrl_gym_main(["train", "--check", f"data.train_data=['{data}']", f"trainer.policy.model.path={CHAT_MODEL}",
                           "trainer.use_ray=false", "trainer.train_batch_size=1",
                           "trainer.policy_mini_batch_size=1"]) == 2
    assert f"  - {named}" in capsys.readouterr().err


def test_a_batch_larger_than_the_rows_left_after_long_prompts_is_a_config_error(tiny_chat_model, tmp_path,
                                                                                 capsys):
    """Prompts over trainer.max_prompt_length are left out once the tokenizer has loaded: when too few rows are
    left for one batch, the run says so (exit 2, the error list), not PromptDataset's traceback."""
    import json

    data = tmp_path / "train.jsonl"
    rows = _multiply_rows(data, size=8)
    for row in rows[:5]:
        row["prompt"][0]["content"] += " Take your time and show every step." * 20
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    keys = [f"data.train_data=['{data}']", f"trainer.policy.model.path={tiny_chat_model}", "trainer.use_ray=false",
            "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.max_prompt_length=128",
            "trainer.logger=console", f"trainer.ckpt_path={tmp_path / 'ckpts'}", f"trainer.log_path={tmp_path}"]
    assert main(["--check", *keys]) == 0  # 8 rows hold a batch of 4; their lengths are known only to a tokenizer
    capsys.readouterr()
    assert main(keys) == 2
    err = capsys.readouterr().err
    assert ("- trainer.train_batch_size=4 is larger than the 3 rows left of data.train_data after 5 with prompts "
            "over trainer.max_prompt_length=128 tokens were left out; set it to 3 or fewer, or raise "
            "trainer.max_prompt_length") in err
    assert "Traceback" not in err, err


@pytest.fixture
def warnings_on_stderr():
    """Warnings shown as a plain Python process shows them (pytest records them instead)."""
    import sys
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.simplefilter("ignore", ResourceWarning)  # as Python's own default filters
        warnings.showwarning = show
        yield


def test_a_run_that_resumed_at_its_last_step_ends_saying_nothing_was_trained(tiny_chat_model, toy_data,
                                                                               tmp_path, capsys,
                                                                               warnings_on_stderr):
    """Two runs that leave trainer.ckpt_path at one folder (the default is shared): the second resumes the
    first's checkpoint, trains nothing, and its last lines say so, not just 'finished at step 1'."""
    from tests.skygym_train.toy_envs import toy_overrides

    keys = toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1,
                                                                "trainer.ckpt_interval": 1,
                                                                "trainer.resume_mode": "latest"})
    assert main(keys) == 0
    first = capsys.readouterr().err
    checkpoint = tmp_path / "ckpts" / "global_step_1"
    assert first.strip().splitlines()[-1] == f"finished at step 1; checkpoint: {checkpoint}"
    assert main(keys) == 0
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    resumed = tmp_path / "ckpts" / "global_step_1"
    assert last.startswith(f"nothing was trained: this run resumed from {resumed}")
    assert "trainer.resume_mode=none starts afresh" in last
    # one clean line: not also Python's warning format with its source line (main_base.py:109 ...)
    assert "UserWarning" not in err and "Warning:" not in err and "trainer.fit()" not in err, err
    assert len([line for line in err.splitlines() if "resumed from" in line]) == 1, err


def test_a_resumed_run_on_the_cli_says_so_in_one_warning_line(tiny_chat_model, toy_data, tmp_path, capsys,
                                                              warnings_on_stderr):
    from tests.skygym_train.toy_envs import toy_overrides

    def keys(steps):
        return toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": steps,
                                                                    "trainer.ckpt_interval": 1,
                                                                    "trainer.resume_mode": "latest"})

    assert main(keys(1)) == 0
    capsys.readouterr()
    assert main(keys(2)) == 0
    err = capsys.readouterr().err
    resumed = tmp_path / "ckpts" / "global_step_1"
    said = [line for line in err.splitlines() if "resumed from" in line]
    assert said[0].startswith(f"warning: resumed from {resumed} at step 1 (trainer.resume_mode=latest;"), err
    assert said[1].endswith(f"(resumed from {resumed}, then trained 1 step(s))") and len(said) == 2, err
    assert "UserWarning" not in err, err


def test_a_run_without_checkpoints_ends_saying_none_was_saved_and_why(tiny_chat_model, toy_data, tmp_path,
                                                                      capsys):
    """The last line said `checkpoint: None` (a Python repr); and with neither a checkpoint nor an export, nothing
    said that the trained weights were gone (a new user's cold run)."""
    from tests.skygym_train.toy_envs import toy_overrides

    assert main(toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1})) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == ("finished at step 1; no checkpoint saved (trainer.ckpt_interval=-1) and no Hugging Face export: "
                    "the trained weights were not kept (trainer.hf_save_interval=N exports them every N steps and at "
                    "the end, trainer.ckpt_interval=N checkpoints them)")


def test_a_run_that_exports_names_the_export_in_its_last_line(tiny_chat_model, toy_data, tmp_path, capsys):
    """A run writing a checkpoint and a Hugging Face export ended naming only the checkpoint."""
    from tests.skygym_train.toy_envs import toy_overrides

    keys = toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1,
                                                                "trainer.ckpt_interval": 1,
                                                                "trainer.hf_save_interval": 1,
                                                                "trainer.export_path": tmp_path / "export"})
    assert main(keys) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    export = tmp_path / "export" / "global_step_1"
    assert last == (f"finished at step 1; checkpoint: {tmp_path / 'ckpts' / 'global_step_1'}; "
                    f"Hugging Face export: {export}")
    assert (export / "config.json").is_file()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                    reason="vLLM is installed in this environment: the check refuses the vllm engine only "
                           "without it")
@pytest.mark.parametrize("check", [["--check"], []], ids=["check", "run"])
def test_the_vllm_engine_without_vllm_is_refused_before_anything_loads(check, multiply_data, capsys):
    """`--check` said 'configuration is valid', and the run failed after loading the policy with EngineError's
    traceback; now both name the key and the install command."""
    keys = [f"data.train_data=[{multiply_data}]", f"trainer.policy.model.path={CHAT_MODEL}",
            "trainer.use_ray=false", "generator.backend=vllm"]
    assert main([*check, *keys]) == 2
    err = capsys.readouterr().err
    assert "- generator.backend=vllm: vLLM is not installed here; pip install 'skyrl-gym[vllm]'" in err
    assert "Traceback" not in err


def test_a_config_warning_is_said_once_by_a_run_and_by_check(tiny_chat_model, toy_data, tmp_path, capsys,
                                                               caplog):
    """`trainer.strategy=fsdp` runs FSDP2, which the trainer says: once, where the entry point and the
    trainer's set-up each said it before."""
    import logging

    from tests.skygym_train.toy_envs import toy_overrides

    keys = toy_overrides(tiny_chat_model, toy_data, tmp_path, **{"trainer.max_training_steps": 1,
                                                                "trainer.strategy": "fsdp"})
    said = "trainer.strategy=fsdp: the bundled trainer runs FSDP2"
    with caplog.at_level(logging.WARNING, logger="skygym_train.trainer"):
        assert main(keys) == 0
    logged = [r.getMessage() for r in caplog.records if said in r.getMessage()]
    assert len(logged) + capsys.readouterr().err.count(said) == 1
    assert main(["--check", *keys]) == 0
    assert capsys.readouterr().err.count(f"warning: {said}") == 1


def test_train_help_shows_the_keys_every_run_needs_and_an_example_that_checks(tmp_path, capsys):
    """`skyrl-gym train --help` listed four options and nothing of the hundreds of keys; it now names the two
    every run needs and an example, which runs as printed (here with --check) in an empty folder."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    with pytest.raises(SystemExit):
        skyrl_gym_main(["train", "--help"])
    shown = capsys.readouterr().out
    assert "every run needs data.train_data" in shown and "trainer.policy.model.path" in shown
    commands = re.search(r"^  python -c .*?trainer.ckpt_interval=-1$", shown, flags=re.S | re.M).group(0)
    assert "skyrl-gym train --check" in commands
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(["bash", "-ec", commands], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "configuration is valid" in done.stderr and (tmp_path / "train.jsonl").is_file()
    assert "plays up to" not in done.stderr  # the rows are single-turn: no warning that the turn cap cuts them short


@pytest.mark.parametrize("use_ray", ["false", "true"])
def test_ctrl_c_stops_a_run_between_steps_and_says_how_to_go_on(use_ray, tiny_chat_model, tmp_path):
    """`skyrl-gym train` at Ctrl-C: the step in progress finishes, the run stops with exit status 130 and one
    line naming the step and the last checkpoint (which the same command goes on from), its metrics and plot
    written, no traceback and no hang at exit (with Ray too, whose processes get the Ctrl-C as well)."""
    import json
    import re

    if use_ray == "true":
        pytest.importorskip("ray", reason="the Ray case needs ray: pip install 'skyrl-gym[train]'")

    from skyrl_gym.data import write_jsonl
    from skyrl_gym.datasets import build_rows
    from tests.skygym_train.ctrl_c import interrupt_after

    rows = build_rows("multiply", split="train", size=64, seed=0, num_digits=1)
    write_jsonl(rows, tmp_path / "train.jsonl")
    keys = [f"data.train_data=[{tmp_path / 'train.jsonl'}]", f"trainer.policy.model.path={tiny_chat_model}",
            f"trainer.use_ray={use_ray}", "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4",
            "generator.n_samples_per_prompt=2", "generator.sampling_params.max_generate_length=4",
            "trainer.max_training_steps=200", "trainer.epochs=100", "trainer.ckpt_interval=2",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}", "trainer.logger=console,jsonl",
            f"trainer.log_path={tmp_path / 'logs'}", "trainer.run_name=run", "trainer.progress_bar=false",
            f"trainer.plot_path={tmp_path / 'plot.png'}"]
    code, output = interrupt_after(["-m", "skygym_train.entrypoints.main_base", *keys], "[step 2]")
    assert code == 130 and "Traceback" not in output, output
    last = output.strip().splitlines()[-1]
    found = re.fullmatch(r"interrupted at step (\d+) of 200; the same command goes on from the last "
                         r"checkpoint, " + re.escape(str(tmp_path / "ckpts")) + r"/global_step_(\d+)", last)
    assert found, output
    step, saved = int(found[1]), int(found[2])
    assert 2 <= step < 200 and saved == step - step % 2
    lines = (tmp_path / "logs" / "run" / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert max(m["step"] for m in metrics) == step
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def _default_hangup_and_term() -> None:
    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


@pytest.mark.parametrize("signum, use_ray", [(signal.SIGTERM, "false"), (signal.SIGHUP, "false"),
                                             (signal.SIGTERM, "true")])  # ray.init replaced SIGTERM's handler
def test_sigterm_ends_a_run_as_a_second_ctrl_c_does_leaving_no_temporary_folder(signum, use_ray, tiny_chat_model,
                                                                                tmp_path):
    """`timeout`, a scheduler's stop or a closed terminal killed the run at once: the checkpoint weight sync's
    folder (a whole model) stayed in the temporary folder (a resource audit). The run now closes and exits
    128 + the signal's number, saying so."""
    import os
    import shutil
    import tempfile

    from skyrl_gym.data import write_jsonl
    from skyrl_gym.datasets import build_rows
    from tests.skygym_train.ctrl_c import interrupt_after

    if use_ray == "true":
        pytest.importorskip("ray", reason="the Ray case needs ray: pip install 'skyrl-gym[train]'")
    write_jsonl(build_rows("multiply", split="train", size=64, seed=0, num_digits=1), tmp_path / "train.jsonl")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    keys = [f"data.train_data=[{tmp_path / 'train.jsonl'}]", f"trainer.policy.model.path={tiny_chat_model}",
            f"trainer.use_ray={use_ray}", "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4",
            "generator.n_samples_per_prompt=2", "generator.sampling_params.max_generate_length=4",
            "generator.weight_sync_backend=checkpoint", "trainer.max_training_steps=200", "trainer.epochs=100",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}", "trainer.logger=console", "trainer.progress_bar=false"]
    ray_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    try:
        # under nohup (a CI runner may be) SIGHUP is ignored, and a command keeps it ignored: the run starts as
        # from a terminal, with both signals' default actions
        code, output = interrupt_after(["-m", "skygym_train.entrypoints.main_base", *keys], "[step 2]",
                                       signum=signum, group=False,  # as `timeout` and `kill PID` send it
                                       env={**os.environ, "TMPDIR": str(scratch), "RAY_TMPDIR": ray_dir},
                                       preexec_fn=_default_hangup_and_term)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert code == 128 + signum and "Traceback" not in output, output
    assert output.strip().splitlines()[-1] == f"terminated (signal {signum}): stopped at once; nothing more written"
    assert not list(scratch.glob("skyrl-weight-sync-*")), sorted(p.name for p in scratch.iterdir())


def test_the_multiply_tutorials_cpu_script_runs_from_any_folder(tmp_path):
    """`bash .../run_multiply_cpu.sh` from another folder said `No module named 'examples'`; now it reaches
    the tutorial's entry point, which reads the overrides (here refusing a misspelt key: no model loads)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("ray", reason="the tutorial trains in a Ray task, as SkyRL-train's does: pip install "
                                      "'skyrl-gym[train]' (a GPU machine without Ray skips it)")
    script = Path(__file__).resolve().parents[3] / "examples" / "multiply_tutorial" / "run_multiply_cpu.sh"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(script), "trainer.no_such_key=1"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert "No module named" not in done.stderr, done.stderr
    assert done.returncode == 2 and "trainer.no_such_key" in done.stderr, done.stderr


def test_the_multiply_tutorials_gpu_script_passes_its_own_check(tiny_chat_model, tmp_path):
    """A cold run: `run_multiply.sh --check` refused the script's own `weight_sync_backend=nccl` (its engine shares
    policy rank 0's GPU), on any machine: the GPU recipe could not start. The script's hub model is asked of the
    hub, out of reach here: the tiny local model stands in for it (an argument after the script's own keys)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "examples" / "multiply_tutorial"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "DATA_DIR": str(tmp_path)}
    subprocess.run([sys.executable, str(folder / "multiply_dataset.py"), "--output_dir", str(tmp_path)], check=True,
                   capture_output=True, timeout=120)
    done = subprocess.run(["bash", str(folder / "run_multiply.sh"), "--check",
                           f"trainer.policy.model.path={tiny_chat_model}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0 and "configuration is valid" in done.stdout + done.stderr, done.stderr[-3000:]


def test_check_names_a_hub_model_that_cannot_be_had_here(multiply_data, tmp_path, monkeypatch, capsys):
    """A cold run: `--check` said "valid" for a hub id that the run, offline, then failed to fetch."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert main(["--check", f"data.train_data=['{multiply_data}']", "trainer.use_ray=false",
                 "trainer.policy.model.path=someone/some-model", "environment.env_class=multiply"]) == 2
    assert ("  - trainer.policy.model.path=someone/some-model: hub model 'someone/some-model' is not in the hub "
            "cache, and HF_HUB_OFFLINE=1 forbids fetching it") in capsys.readouterr().err


def test_rows_without_env_class_that_fall_to_the_default_env_are_named_by_check(tmp_path, capsys):
    """A contributor's cold run: rows that lost their env_class were trained as gsm8k (environment.env_class's
    default), and --check said only "valid"."""
    data = tmp_path / "train.jsonl"
    row = '{"prompt": [{"role": "user", "content": "digits of 47?"}], "reward_spec": {"ground_truth": "11"}}\n'
    data.write_text(row.replace("}}\n", '}, "env_class": "multiply"}\n') + row + row)
    keys = [f"data.train_data=[{data}]", f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=false",
            "trainer.train_batch_size=1", "trainer.policy_mini_batch_size=1"]
    assert main(["--check", *keys]) == 0
    err = capsys.readouterr().err
    assert (f"warning: 2 rows of 3 in data.train_data name no env_class and run as environment.env_class=gsm8k, "
            f"its default (first: row 2 (line 2 of {data})); give the rows their env_class, or set "
            "environment.env_class") in err
    assert err.rstrip().endswith("configuration is valid")
    # the env of the rows that name none, set on purpose: nothing to say
    assert main(["--check", *keys, "environment.env_class=multiply"]) == 0
    assert "name no env_class" not in capsys.readouterr().err
