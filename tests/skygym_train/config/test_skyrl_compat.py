"""Every SkyRL-train 0.3.1 key is honoured or refused with its reason: nothing accepted and then ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from skygym_train.config import ConfigError, SkyRLTrainConfig, load_config, validate_config
from skygym_train.config.compat import DEFAULT_ONLY, HONOURED, REFUSED, RULES, render
from skygym_train.config.loader import check_key
from skygym_train.config.validation import config_warnings, cuda_available
from skygym_train.entrypoints.main_base import main
from tests.tiny_models import CHAT_MODEL

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def data_file(tmp_path: Path) -> str:
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply"}\n')
    return str(path)


def _valid(data_file: str, *extra: str):
    return [f"data.train_data=[{data_file}]", f"trainer.policy.model.path={CHAT_MODEL}",
            "trainer.use_ray=false", *extra]


def _problems(overrides, has_cuda: bool) -> str:
    cfg = load_config(overrides, validate=False)
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, has_cuda=has_cuda)
    return "\n".join(info.value.problems)


def test_the_table_covers_upstreams_keys_and_every_one_loads():
    assert len(RULES) == 195 + 8  # ppo_base_config.yaml and its environment.skyrl_gym defaults
    assert {r.status for r in RULES.values()} == {HONOURED, REFUSED, DEFAULT_ONLY}
    assert all(rule.note for rule in RULES.values() if rule.status != HONOURED)
    schema = OmegaConf.structured(SkyRLTrainConfig)
    for key in RULES:
        check_key(schema, key)  # raises for a key the loader would reject


def test_upstream_run_script_keys_load(data_file):
    cfg = load_config(_valid(
        data_file,
        "environment.skyrl_gym.text2sql.db_path=/data/sql",
        "environment.skyrl_gym.search.search_url=local-retriever:8000",
        "environment.skyrl_gym.search.topk=5",
        "environment.skyrl_gym.max_env_workers=4",
        "generator.use_conversation_multi_turn=false",
        "generator.chat_template.source=name",
        "generator.async_engine=true",
        "generator.batched=true",
        "trainer.algorithm.use_tis=false",
        "trainer.policy.sequence_parallel_size=1",
        "trainer.flash_attn=false",
        "+generator.engine_init_kwargs={}",
    ))
    assert cfg.environment.skyrl_gym["text2sql"] == {"db_path": "/data/sql"}
    assert cfg.environment.skyrl_gym["search"]["search_url"] == "local-retriever:8000"
    assert cfg.environment.skyrl_gym["max_env_workers"] == 4
    assert cfg.generator.batched and not cfg.generator.use_conversation_multi_turn


def test_default_only_keys_are_refused_with_the_reason(data_file):
    problems = _problems(_valid(
        data_file,
        "generator.step_wise_trajectories=true",
        "generator.async_engine=false",
        "trainer.fully_async.max_staleness_steps=2",
        "generator.sampling_params.repetition_penalty=1.1",
    ), has_cuda=True)
    assert "generator.step_wise_trajectories=true" in problems
    assert "generator.async_engine=false" in problems and "leave it at true" in problems
    assert "trainer.fully_async.max_staleness_steps=2" in problems
    assert "generator.sampling_params.repetition_penalty=1.1" in problems


def test_gpu_only_settings_are_refused_on_a_cpu_machine(data_file):
    problems = _problems(_valid(
        data_file,
        "trainer.flash_attn=true",
        "generator.weight_sync_backend=nccl",
        "trainer.use_ray=true",
        "trainer.placement.policy_num_gpus_per_node=4",
        "trainer.policy.fsdp_config.cpu_offload=true",
        "trainer.critic.fsdp_config.shard_one_gpu=true",
    ), has_cuda=False)
    assert "trainer.flash_attn=true: needs CUDA GPUs with flash-attn installed" in problems
    assert "generator.weight_sync_backend=nccl: needs CUDA GPUs" in problems
    assert "trainer.placement.policy_num_gpus_per_node=4: this machine has no CUDA GPUs" in problems
    assert "trainer.policy.fsdp_config.cpu_offload=true: needs CUDA GPUs" in problems
    assert "trainer.critic.fsdp_config.shard_one_gpu=true: a GPU setting" in problems


def test_precisions_that_would_train_wrong_or_crash_on_a_gpu_are_refused(data_file, monkeypatch):
    """fp16 under FSDP2 (no loss scaling: gradients underflow, or overflow and the step is skipped) and flash
    attention over fp32 compute (no fp32 kernel) were accepted and then failed on the GPU; a dtype's misspelt name
    raised a KeyError in the worker."""
    import skygym_train.config.validation as validation

    monkeypatch.setattr(validation, "flash_attn_installed", lambda: True)
    problems = _problems(_valid(data_file, "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp16",
                                "trainer.critic.fsdp_config.mixed_precision.reduce_dtype=float32",
                                "trainer.flash_attn=true"), has_cuda=True)
    assert "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp16: the FSDP2 worker does no loss" in problems
    assert "trainer.critic.fsdp_config.mixed_precision.reduce_dtype='float32': expected one of bf16" in problems
    assert "flash_attn" not in problems  # fp16 compute has flash attention's kernels
    problems = _problems(_valid(data_file, "trainer.flash_attn=true", "trainer.bf16=false",
                                "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp16"), has_cuda=True)
    assert problems == ("trainer.flash_attn=true: flash attention computes in bf16 or fp16 only, and trainer.bf16=false "
                        "computes in fp32; set trainer.flash_attn=false (SDPA) or null (SDPA for fp32)")
    problems = _problems(_valid(data_file, "trainer.flash_attn=true", "trainer.algorithm.use_kl_loss=true",
                                "trainer.ref.fsdp_config.mixed_precision.param_dtype=fp32",
                                "trainer.policy.fsdp_config.mixed_precision.reduce_dtype=fp8"), has_cuda=True)
    # the reference model runs (the KL loss needs it) with the trainer's flash_attn and its own precision
    assert "and trainer.ref.fsdp_config.mixed_precision.param_dtype=fp32 computes in fp32" in problems
    assert "reduce_dtype='fp8'" in problems and "does no loss scaling" not in problems
    # where they apply: fp16 under DeepSpeed (its fp16 section scales the loss), fp16 on the CPU (read on GPUs only),
    # the defaults on a GPU
    deepspeed = load_config(_valid(data_file, "trainer.strategy=deepspeed",
                                   "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp16"), validate=False)
    assert validation._check_precision(deepspeed, has_cuda=True) == []
    fp16 = load_config(_valid(data_file, "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp16"),
                       validate=False)
    assert validation._check_precision(fp16, has_cuda=False) == []
    assert validation._check_precision(load_config(_valid(data_file), validate=False), has_cuda=True) == []


@pytest.mark.skipif(cuda_available(), reason="checks what load_config refuses on a machine without CUDA GPUs")
def test_load_config_checks_this_machine(data_file):
    with pytest.raises(ConfigError, match="generator.weight_sync_backend=nccl: needs CUDA GPUs"):
        load_config(_valid(data_file, "generator.weight_sync_backend=nccl"))
    assert main(["--check", *_valid(data_file, "trainer.flash_attn=true")]) == 2


def test_in_process_engines_refuse_copies_and_backend_mismatches(data_file):
    problems = _problems(_valid(
        data_file,
        "generator.backend=hf",
        "generator.num_inference_engines=4",
        "generator.inference_engine_tensor_parallel_size=2",
        "generator.run_engines_locally=false",
        "generator.enable_prefix_caching=true",
        "generator.gpu_memory_utilization=0.5",
    ), has_cuda=True)
    assert "generator.num_inference_engines=4: hf engines run in the trainer's process on one device" in problems
    assert "generator.inference_engine_tensor_parallel_size=2: the HF engine runs on one device" in problems
    assert "generator.run_engines_locally=false contradicts generator.backend=hf" in problems
    assert "generator.enable_prefix_caching=true: a vLLM engine setting" in problems
    assert "generator.gpu_memory_utilization=0.5: vLLM only" in problems
    assert "generator.num_inference_engines=4: vllm engines" in _problems(
        _valid(data_file, "generator.backend=vllm", "generator.num_inference_engines=4"), has_cuda=True)


def test_strategy_fsdp_says_it_runs_fsdp2(data_file):
    cfg = load_config(_valid(data_file, "trainer.strategy=fsdp"))
    assert any("runs FSDP2" in w for w in config_warnings(cfg, has_cuda=False))
    cfg.trainer.use_ray = True  # colocation is a placement of Ray workers: it only says something with Ray on
    assert cfg.trainer.placement.colocate_all  # the default: for an engine in the trainer's process, nothing to say
    assert not any("colocate_all" in w for w in config_warnings(cfg, has_cuda=False))
    cfg.generator.run_engines_locally = True  # engine actors, which share the policy's CPU bundles
    assert any("colocate_all=true" in w for w in config_warnings(cfg, has_cuda=False))
    assert not any("colocate_all" in w for w in config_warnings(cfg, has_cuda=True))
    cfg.trainer.use_ray = False
    assert not any("colocate_all" in w for w in config_warnings(cfg, has_cuda=False))


def test_deprecated_kl_flags_set_the_estimator(data_file):
    assert load_config(_valid(data_file, "trainer.algorithm.use_abs_kl=true")).trainer.algorithm.kl_estimator_type == "abs"
    problems = _problems(_valid(data_file, "trainer.algorithm.use_kl_estimator_k3=true",
                                "trainer.algorithm.kl_estimator_type=k1"), has_cuda=False)
    assert "use_kl_estimator_k3=true contradicts kl_estimator_type='k1'" in problems


def test_chat_template_file_and_batched_need_their_partners(data_file, tmp_path):
    problems = _problems(_valid(data_file, "generator.chat_template.name_or_path=qwen3_with_thinking",
                                "generator.batched=true", "generator.max_turns=2"), has_cuda=False)
    assert "no named chat templates are bundled" in problems
    assert "generator.batched=true: batched generation is single-turn" in problems
    template = tmp_path / "t.j2"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    cfg = load_config(_valid(data_file, "generator.chat_template.source=file",
                             f"generator.chat_template.name_or_path={template}"))
    from skygym_train.generation import chat_template

    assert chat_template(cfg) == template.read_text()


def test_skyrl_gym_sections_reach_each_env_as_its_env_config(data_file):
    from skygym_train.generation import env_configs

    cfg = load_config(_valid(data_file, "environment.skyrl_gym.text2sql.db_path=/data/sql",
                             "environment.skyrl_gym.search.topk=5", "environment.env_class=search",
                             "environment.env_config.timeout=7"))
    assert env_configs(cfg) == {"text2sql": {"db_path": "/data/sql"}, "search": {"topk": 5, "timeout": 7}}


def test_a_section_for_an_env_that_is_not_registered_fails_the_check(data_file, capsys):
    """``environment.skyrl_gym.serch.search_url=...`` reached no env, silently; SkyRL-train's own sections left at
    their nulls stay allowed (``llm_as_a_judge`` is not an env of this hub)."""
    assert main(["--check", *_valid(data_file, "environment.skyrl_gym.serch.search_url=http://x",
                                    "environment.skyrl_gym.search.topk=3")]) == 2
    err = capsys.readouterr().err
    assert "- environment.skyrl_gym.serch: a section for an env that is not registered" in err
    assert "Did you mean: 'search'" in err and "environment.skyrl_gym.search:" not in err
    assert "llm_as_a_judge" not in err


def test_a_key_its_env_does_not_read_fails_the_check(data_file, tmp_path, capsys):
    """``environment.skyrl_gym.search.serch_url=...`` left the search env at its default URL, silently; so did a
    misspelt ``environment.env_config`` key. SkyRL-train's null keys stay allowed."""
    assert main(["--check", *_valid(data_file, "environment.skyrl_gym.search.serch_url=http://x",
                                    "environment.skyrl_gym.search.topk=3", "environment.env_class=multiply",
                                    "environment.env_config.boxed_wrong_rewrd=0.2")]) == 2
    err = capsys.readouterr().err
    assert ("- environment.skyrl_gym.search.serch_url: env 'search' has no env_config key 'serch_url' "
            "(did you mean 'search_url'? it reads: ") in err
    assert ("- environment.env_config.boxed_wrong_rewrd: env 'multiply' has no env_config key 'boxed_wrong_rewrd' "
            "(did you mean 'boxed_wrong_reward'? it reads: boxed_wrong_reward)") in err
    assert "environment.skyrl_gym.search.topk" not in err and "log_requests:" not in err
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "reward_spec": {"ground_truth": "6"}}\n')
    assert main(["--check", *_valid(str(rows), "environment.skyrl_gym.search.search_url=http://x",
                                    "environment.env_class=multiply", "trainer.train_batch_size=1",
                                    "trainer.policy_mini_batch_size=1",
                                    "environment.env_config.boxed_wrong_reward=0.2")]) == 0, capsys.readouterr()


def test_a_key_set_for_the_default_env_class_says_which_env_reads_it(data_file, capsys):
    """With multiply rows and the default env_class (gsm8k), `environment.env_config.boxed_wrong_reward` was refused
    as a key gsm8k does not read, with no word of where it goes (a new user's cold run)."""
    assert main(["--check", *_valid(data_file, "environment.env_config.boxed_wrong_reward=0.1")]) == 2
    err = capsys.readouterr().err
    assert ("- environment.env_config.boxed_wrong_reward: env 'gsm8k' has no env_config key 'boxed_wrong_reward' "
            "(it reads no env_config key); environment.env_config goes to environment.env_class ('gsm8k'), and "
            "'boxed_wrong_reward' is read by multiply: set environment.skyrl_gym.multiply.boxed_wrong_reward, or "
            "environment.env_class=multiply") in err, err
    # a key no env reads gets no such hint
    assert main(["--check", *_valid(data_file, "environment.env_config.no_env_reads_this=1")]) == 2
    err = capsys.readouterr().err
    assert "env 'gsm8k' has no env_config key 'no_env_reads_this'" in err and "is read by" not in err


def test_a_value_the_env_refuses_fails_the_check_once_naming_where_it_is_set(tmp_path, capsys):
    """`environment.skyrl_gym.multiply.boxed_wrong_reward=abc` passed `--check` (the env's refusal was taken for
    the env's own failure, left to the run), then failed the run (a new user's cold run). It is said once, not
    once per row."""
    rows = tmp_path / "rows.jsonl"
    row = {"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply", "reward_spec": {"ground_truth": "6"}}
    rows.write_text((json.dumps(row) + "\n") * 3)
    sizes = ("trainer.train_batch_size=1", "trainer.policy_mini_batch_size=1")
    assert main(["--check", *_valid(str(rows), *sizes, "environment.skyrl_gym.multiply.boxed_wrong_reward=abc")]) == 2
    err = capsys.readouterr().err
    said = "- environment.skyrl_gym.multiply: env 'multiply': env_config.boxed_wrong_reward must be a number, got 'abc'"
    assert err.count(said) == 1, err
    assert main(["--check", *_valid(str(rows), *sizes, "environment.env_class=multiply",
                                    "environment.env_config.boxed_wrong_reward=abc")]) == 2
    assert ("- environment.skyrl_gym.multiply / environment.env_config: env 'multiply': env_config.boxed_wrong_reward "
            "must be a number") in capsys.readouterr().err


def test_unknown_env_class_fails_the_check_with_close_matches(data_file, tmp_path, capsys):
    assert main(["--check", *_valid(data_file, "environment.env_class=gsm9k")]) == 2
    err = capsys.readouterr().err
    assert "environment.env_class=gsm9k" in err and "'gsm8k'" in err
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": [{"role": "user", "content": "hi"}], "env_class": "multiplyy"}\n')
    assert main(["--check", *_valid(str(rows))]) == 2
    err = capsys.readouterr().err
    assert f"row 1 (line 1 of {rows}): env_class=multiplyy" in err and "'multiply'" in err


def test_committed_compat_page_is_current():
    page = (ROOT / "docs" / "compat.md").read_text(encoding="utf-8")
    start, end = "<!-- skyrl-train-keys:start -->\n", "<!-- skyrl-train-keys:end -->"
    assert page[page.index(start) + len(start): page.index(end)] == render(), (
        "docs/compat.md is stale: run `python -m skygym_train.config.compat --write-docs`")
    assert "silently ignored" not in render()


def test_the_compat_tool_says_where_upstreams_file_is_when_it_is_missing(tmp_path, capsys):
    """A path copied from docs/compat.md ended in a FileNotFoundError traceback."""
    from skygym_train.config.compat import _main

    assert _main(["--upstream", str(tmp_path / "ppo_base_config.yaml"), "--write-docs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --upstream {tmp_path / 'ppo_base_config.yaml'}: no such file") and "0.3.1" in err


def test_truncated_importance_sampling_needs_a_cap_and_rollout_logprobs(data_file):
    problems = _problems(_valid(data_file, "trainer.algorithm.use_tis=true",
                                "generator.sampling_params.logprobs=null"), has_cuda=False)
    assert "trainer.algorithm.tis_imp_ratio_cap=-1.0: use_tis=true needs a positive cap" in problems
    assert "trainer.algorithm.use_tis=true: needs the engine's log-probs" in problems
    cfg = load_config(_valid(data_file, "trainer.algorithm.use_tis=true", "trainer.algorithm.tis_imp_ratio_cap=2.0"))
    assert cfg.trainer.algorithm.use_tis


def test_one_bad_size_does_not_hide_the_other_size_problems(data_file):
    """trainer.epochs=-1 hid that train_batch_size is not a multiple of policy_mini_batch_size: a second run of
    --check found it. Each check between sizes now runs when its own sizes are valid."""
    problems = _problems(_valid(data_file, "trainer.epochs=-1", "trainer.train_batch_size=8",
                                "trainer.policy_mini_batch_size=3"), has_cuda=False)
    assert "trainer.epochs=-1: must be a positive integer" in problems
    assert "trainer.train_batch_size=8 is not a multiple of trainer.policy_mini_batch_size=3" in problems
