"""``skyrl-gym eval`` end to end with a real (tiny) model: table, summary and trajectories with token ids."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from skyrl_gym.cli import main
from skyrl_gym.data import write_parquet


def gsm8k_rows() -> List[Dict[str, Any]]:
    return [
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {a} + {b}? Answer '#### N'."}],
             "env_class": "gsm8k", "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
             "extra_info": {"index": i}}
        for i, (a, b) in enumerate([(1, 2), (3, 4), (5, 6)])
    ]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from skygym_adapters.models import build_tiny_model

    return build_tiny_model()


def test_eval_with_the_hf_engine_writes_trajectories_with_token_ids(tmp_path: Path, tiny_model: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    data = write_parquet(gsm8k_rows(), tmp_path / "rows.parquet")
    out, summary_path = tmp_path / "traj.jsonl", tmp_path / "summary.json"
    code = main(["eval", "--env", "gsm8k_multi_turn", "--data", str(data), "--engine", "hf", "--model", str(tiny_model),
                 "-n", "2", "--max-tokens", "4", "--max-turns", "2", "--seed", "1", "--check-drift",
                 "--output", str(out), "--summary-json", str(summary_path), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    for label in ("mean_reward", "pass@1", "pass@2", "mean_turns", "mean_response_tokens", "stop reason",
                  "env: gsm8k_multi_turn/avg_steps"):
        assert label in printed, label
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 6  # 3 rows x 2 samples
    assert {(l["trajectory_id"]["instance_id"], l["trajectory_id"]["repetition_id"]) for l in lines} == {
        (str(i), r) for i in range(3) for r in range(2)}
    for line in lines:
        assert line["env_class"] == "gsm8k_multi_turn" and line["num_turns"] == 2
        assert len(line["response_ids"]) == len(line["loss_mask"]) == len(line["rewards"]) == len(line["logprobs"])
        assert all(isinstance(t, int) for t in line["prompt_ids"] + line["response_ids"])
        assert line["drift"]["kind"] != "template"
    summary = json.loads(summary_path.read_text())
    assert summary["trajectories"] == 6 and summary["samples_per_prompt"] == 2
    assert summary["mean_turns"] == 2.0 and summary["errors"] == 0


def test_eval_with_a_remote_server(tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture) -> None:
    from skygym_adapters.engines.hf import HFEngine
    from tests.adapters.http_test_servers import make_app, serve

    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in gsm8k_rows()[:2]))
    backend = HFEngine(str(tiny_model), device="cpu")
    try:
        with serve(make_app(backend, str(tiny_model))) as url:
            code = main(["eval", "--data", str(data), "--engine", "remote", "--base-url", url, "--model",
                         str(tiny_model), "--max-tokens", "4", "--output", str(tmp_path / "t.jsonl"), "--no-progress"])
    finally:
        backend.close()
    assert code == 0
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 2
    assert "pass@1" in capsys.readouterr().out


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``skyrl-gym`` in its own process: what a user sees on stderr at exit (aiohttp's "Unclosed client session"
    is printed by the garbage collector then, which an in-process run never reaches)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-m", "skyrl_gym.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("engine, served", [("remote", None), ("remote", "m"), ("sglang", None)])
def test_eval_against_a_server_that_is_down_is_one_error_line_before_any_progress(
        tmp_path: Path, tiny_model: Path, engine: str, served: "str | None") -> None:
    """It was a 40-line EngineError traceback and then "Unclosed client session"; then one line, but after a
    progress bar that ran to 100% as each rollout failed on the server in turn (and with --served-model, or
    SGLang's engine, a line per rollout's failure). The server is now asked once, before the bar."""
    from tests.adapters.http_test_servers import _free_port

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in gsm8k_rows()[:3]))
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    done = run_cli("eval", "--data", str(data), "--engine", engine, "--base-url", url, "--model", str(tiny_model),
                   "-n", "2", *(("--served-model", served) if served else ()), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # no bar, no traceback, no unclosed session
    if served is None and engine == "remote":
        assert done.stderr.startswith(f"error: could not ask {url}/v1/models for the model name"), done.stderr
        assert f"check that an OpenAI-compatible server is running at {url}" in done.stderr
        assert done.stderr.strip().endswith("name the model: --served-model NAME"), done.stderr  # the flag
    else:
        server = "an OpenAI-compatible server" if engine == "remote" else "an SGLang server"
        assert done.stderr.startswith(f"error: nothing answers at {url} ("), done.stderr
        assert f"check that {server}" in done.stderr and done.stderr.strip().endswith(f"is running at {url}")
    assert not (tmp_path / "eval_trajectories.jsonl").exists()


def test_eval_with_an_engine_whose_package_is_missing_is_one_error_line(tmp_path: Path) -> None:
    """It was a 24-line traceback ending in the EngineError, exit 1."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed in this environment: the test needs one without it (the core session's)")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(gsm8k_rows()[0]))
    done = run_cli("eval", "--data", str(data), "--engine", "vllm", "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --engine vllm: the vllm engine needs vLLM"), done.stderr
    assert "in a virtual environment of its own" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_eval_with_a_remote_server_closes_its_http_session(tmp_path: Path, tiny_model: Path) -> None:
    from skygym_adapters.engines.hf import HFEngine
    from tests.adapters.http_test_servers import make_app, serve

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(gsm8k_rows()[0]))
    backend = HFEngine(str(tiny_model), device="cpu")
    try:
        with serve(make_app(backend, str(tiny_model))) as url:
            done = run_cli("eval", "--data", str(data), "--engine", "remote", "--base-url", url, "--model",
                           str(tiny_model), "--max-tokens", "2", "--output", str(tmp_path / "t.jsonl"),
                           "--no-progress", cwd=tmp_path)
    finally:
        backend.close()
    assert done.returncode == 0, done.stderr
    assert "pass@1" in done.stdout
    assert "Unclosed" not in done.stderr, done.stderr


def test_eval_refuses_a_chat_format_answer_to_a_completions_request(tmp_path: Path, tiny_model: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A server answering in chat format (choices[].message.content) to --api completions was scored as empty
    replies: mean_reward 0, errors 0, exit 0."""
    from tests.adapters.http_test_servers import make_canned_openai_app, serve

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(gsm8k_rows()[0]))
    state = {"answer": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "#### 3"},
                                     "finish_reason": "stop"}]}}
    with serve(make_canned_openai_app(state)) as url:
        code = main(["eval", "--data", str(data), "--engine", "remote", "--base-url", url, "--model",
                     str(tiny_model), "--output", str(tmp_path / "t.jsonl"), "--no-progress"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {url}/v1/completions answered without a reply text: choices[0].text is missing; "
                          "the reply is in chat format"), err
    assert "--api chat" in err


def test_one_broken_reply_costs_only_its_own_trajectory(tmp_path: Path, tiny_model: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """A server that failed one request stopped the whole eval, and nothing was written."""
    from tests.adapters.http_test_servers import make_canned_openai_app, serve

    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in gsm8k_rows()))
    good = {"choices": [{"index": 0, "text": "#### 3", "finish_reason": "stop"}]}
    broken = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "#### 3"}}]}
    state = {"answers": [good, broken, good]}
    with serve(make_canned_openai_app(state)) as url:
        code = main(["eval", "--data", str(data), "--engine", "remote", "--base-url", url, "--model",
                     str(tiny_model), "--output", str(tmp_path / "t.jsonl"), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1 and "error: 1 of 3 trajectories errored (first: engine: " in captured.err, captured.err
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    errors = [line["error"] for line in lines]
    assert len(lines) == 3 and errors.count(None) == 2, errors
    assert [error for error in errors if error][0].startswith("engine: ") and "without a reply text" in str(errors)
    assert "pass@1" in captured.out


def test_eval_writes_its_trajectories_beside_the_rows_not_into_the_current_folder(
        tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quickstart's printed eval command, run from the repository root, left eval_trajectories.jsonl there."""
    here, rows_dir = tmp_path / "here", tmp_path / "outputs" / "data"
    here.mkdir()
    rows_dir.mkdir(parents=True)
    (rows_dir / "validation.jsonl").write_text(json.dumps(gsm8k_rows()[0]))
    monkeypatch.chdir(here)
    code = main(["eval", "--data", str(rows_dir / "validation.jsonl"), "--engine", "hf", "--model", str(tiny_model),
                 "--max-tokens", "2", "--no-progress"])
    assert code == 0
    assert list(here.iterdir()) == []
    written = rows_dir / "eval_trajectories.jsonl"
    assert len(written.read_text().splitlines()) == 1
    said = capsys.readouterr().out
    assert f"wrote 1 trajectories to {written}\n" in said and "replacing" not in said
    code = main(["eval", "--data", str(rows_dir / "validation.jsonl"), "--engine", "hf", "--model", str(tiny_model),
                 "--max-tokens", "2", "--no-progress"])
    assert code == 0  # again: the file of the run before is replaced, and the user told
    assert f"wrote 1 trajectories to {written} (replacing the file that was there; --output FILE writes " \
           "elsewhere)" in capsys.readouterr().out
    # an --output that cannot be a file: refused before the model loads
    code = main(["eval", "--data", str(rows_dir / "validation.jsonl"), "--engine", "hf", "--model",
                 str(tmp_path / "no-model"), "--no-progress", "--output", str(rows_dir)])
    assert code == 2
    assert capsys.readouterr().err == f"error: --output: {rows_dir} is a folder; give a file name\n"
    rows_file = rows_dir / "validation.jsonl"
    for output, said in ((rows_file / "out.jsonl", f"{rows_file} is a file, not a folder"),
                         (Path("/proc/no-such-folder/out.jsonl"), "No such file or directory")):
        code = main(["eval", "--data", str(rows_file), "--engine", "hf", "--model", str(tmp_path / "no-model"),
                     "--no-progress", "--output", str(output)])
        assert code == 2 and capsys.readouterr().err == f"error: --output: cannot write {output}: {said}\n"
    assert rows_file.is_file() and not (tmp_path / "no-model").exists()


def test_eval_reports_bad_input_clearly(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--data", str(tmp_path / "missing.jsonl"), "--no-progress"]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="needs --base-url"):
        data = tmp_path / "rows.jsonl"
        data.write_text(json.dumps(gsm8k_rows()[0]))
        main(["eval", "--data", str(data), "--engine", "remote"])


def test_eval_refuses_an_unknown_env_or_model_before_loading_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A misspelt env id, a row without env_class and a model path that does not exist are each one `error:`
    line and exit 2, before a model loads (the env id was found once per trajectory after the model had
    loaded, the model path as a traceback)."""
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(gsm8k_rows()[0]))
    missing = tmp_path / "missing-model"
    model = ["--engine", "hf", "--model", str(missing)]
    assert main(["eval", "--env", "gsm8kk", "--data", str(data), *model]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --env 'gsm8kk': no env registered with id 'gsm8kk'. "
                          "Did you mean: 'gsm8k'?"), err
    assert main(["eval", "--data", str(data), "--engine", "hf", "--model", str(missing)]) == 2
    if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
        assert capsys.readouterr().err == f"error: --model: model path '{missing}' does not exist\n"
    else:  # without the engine's packages, that is what it says first
        assert "`skyrl-gym eval` needs the 'train' extra" in capsys.readouterr().err
    row = dict(gsm8k_rows()[0], env_class="gsm8k_multi_turnn")
    data.write_text(json.dumps(row))
    assert main(["eval", "--data", str(data), "--engine", "hf", "--model", str(missing)]) == 2
    assert "row 1's env_class 'gsm8k_multi_turnn': no env registered" in capsys.readouterr().err
    del row["env_class"]
    data.write_text(json.dumps(row))
    assert main(["eval", "--data", str(data), "--engine", "hf", "--model", str(missing)]) == 2
    assert "row 1 has no env_class; pass --env ID" in capsys.readouterr().err
    # an env_config key the env does not read (it left every env at its default, silently)
    data.write_text(json.dumps(gsm8k_rows()[0]))
    assert main(["eval", "--data", str(data), "--env", "math", "--env-config", '{"verify_timout": 5}', *model]) == 2
    assert capsys.readouterr().err == ("error: --env-config: env 'math' has no env_config key 'verify_timout' "
                                       "(did you mean 'verify_timeout'? it reads: verify_timeout)\n")
    # a value the env refuses: every trajectory failed on it, after the model had loaded
    data.write_text(json.dumps({**gsm8k_rows()[0], "env_class": "multiply"}))
    assert main(["eval", "--data", str(data), "--env-config", '{"boxed_wrong_reward": "abc"}', *model]) == 2
    assert capsys.readouterr().err == ("error: --env-config: env 'multiply': env_config.boxed_wrong_reward must be "
                                       "a number, got 'abc'\n")


def test_eval_exits_non_zero_when_an_episode_errored_unless_errors_are_allowed(
        tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture) -> None:
    rows = gsm8k_rows()[:2]
    del rows[1]["reward_spec"]  # the gsm8k env refuses a row without its ground truth: that episode errors
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    summary_path = tmp_path / "summary.json"
    args = ["eval", "--data", str(data), "--engine", "hf", "--model", str(tiny_model), "--max-tokens", "2",
            "--output", str(tmp_path / "t.jsonl"), "--summary-json", str(summary_path), "--no-progress"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "errors" in captured.out  # counted in the table
    assert "1 of 2 trajectories errored" in captured.err and "MissingRewardSpec" in captured.err
    assert "--allow-errors" in captured.err
    assert json.loads(summary_path.read_text())["errors"] == 1  # the summary is still written
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 2  # and every trajectory
    assert main(args + ["--allow-errors"]) == 0


def test_eval_decodes_in_the_dtype_given(tmp_path: Path, tiny_model: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    """A training run's engine decodes in bfloat16 where the hardware computes it, `skyrl-gym eval` in
    float32 on a CPU: the quickstart's export, re-evaluated, scored 0.831 against the run's 0.859 until
    `--dtype bfloat16` (0.859) made the two decode alike. The log-probs show which dtype decoded."""
    data = write_parquet(gsm8k_rows(), tmp_path / "rows.parquet")

    def logprobs(*dtype: str) -> List[List[float]]:
        out = tmp_path / f"traj{'-'.join(dtype)}.jsonl"
        argv = ["eval", "--data", str(data), "--model", str(tiny_model), "--device", "cpu",
                "--temperature", "0", "--max-tokens", "3", "--output", str(out), "--no-progress", *dtype]
        assert main(argv) == 0
        capsys.readouterr()
        return [json.loads(line)["logprobs"] for line in out.read_text().splitlines()]

    default, as_float32 = logprobs(), logprobs("--dtype", "float32")
    assert default == as_float32
    assert logprobs("--dtype", "bfloat16") != as_float32


def test_eval_warns_when_max_turns_cuts_a_multi_turn_env_short(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--max-turns defaults to 1, as the trainer's generator.max_turns: a multi-turn env was evaluated on its
    first turn with no word. Now eval says so, as training does, before the model loads."""
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(gsm8k_rows()[0]))
    missing = ["--engine", "hf", "--model", str(tmp_path / "no-model")]
    assert main(["eval", "--env", "gsm8k_multi_turn", "--data", str(data), *missing]) == 2
    err = capsys.readouterr().err
    assert ("warning: env gsm8k_multi_turn plays up to 5 turns (its max_turns) but --max-turns=1 ends every "
            "episode after 1; set --max-turns=5 to play all of them") in err, err
    assert main(["eval", "--env", "gsm8k_multi_turn", "--data", str(data), "--max-turns", "5", *missing]) == 2
    assert "warning" not in capsys.readouterr().err
    assert main(["eval", "--data", str(data), *missing]) == 2  # gsm8k plays one turn: nothing to say
    assert "warning" not in capsys.readouterr().err


def test_ctrl_c_keeps_the_trajectories_that_had_finished(tmp_path: Path, tiny_model: Path) -> None:
    """Ctrl-C of an eval threw away every finished trajectory (64 of 128 in a new user's run), silently. A real
    SIGINT, to the command in a process of its own, while one request is never answered."""
    import signal
    import time

    from tests.adapters.http_test_servers import make_canned_openai_app, serve

    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in gsm8k_rows()))
    good = {"choices": [{"index": 0, "text": "#### 3", "finish_reason": "stop"}]}
    state: Dict[str, Any] = {"answers": [good, good, "hang"]}
    output = tmp_path / "t.jsonl"
    with serve(make_canned_openai_app(state)) as url:
        process = subprocess.Popen(
            [sys.executable, "-m", "skyrl_gym.cli", "eval", "--data", str(data), "--engine", "remote", "--base-url",
             url, "--model", str(tiny_model), "--output", str(output), "--no-progress"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        while not state.get("hanging") and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        # the two answered trajectories score and finish (milliseconds; nothing outside the process says when, so
        # 3 s: 0.5 s was little on a loaded machine)
        time.sleep(3)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=120)
    assert process.returncode == 130, (out, err)
    assert f"interrupted: 2 of 3 trajectories had finished; the 2 finished are in {output} (no summary)" in err, err
    assert "Traceback" not in err
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(lines) == 2 and all(line["error"] is None for line in lines)
