"""What the bundled trainer does with each key of SkyRL-train 0.3.1's ``ppo_base_config.yaml``.

Every upstream key is either honoured (it changes what the trainer does, as upstream's does) or refused: a
value the trainer cannot honour stops ``load_config`` / ``--check`` with the key, the reason and what to do.
No key is accepted and then ignored. ``DEFAULT_ONLY`` keys are refused at any value but their default here
(the generic check below); the other refusals depend on the machine or on other keys and live in
``validation.py`` (each named in the table's note).

``python -m skygym_train.config.compat [--upstream path/to/ppo_base_config.yaml] [--write-docs]`` prints the
table (or writes it into its own section of docs/compat.md); given upstream's YAML (from the skyrl-train 0.3.1
wheel, ``skyrl_train/config/ppo_base_config.yaml``) it first checks that the table covers exactly its keys.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Dict, Iterator, List, Optional

UPSTREAM = "SkyRL-train 0.3.1"

HONOURED = "honoured"
REFUSED = "refused"  # refused under a condition checked in validation.py (the note says when)
DEFAULT_ONLY = "default only"  # refused at any value but the default


@dataclasses.dataclass(frozen=True)
class Rule:
    status: str
    note: str = ""


def H(note: str = "") -> Rule:
    return Rule(HONOURED, note)


def R(note: str) -> Rule:
    return Rule(REFUSED, note)


def D(note: str) -> Rule:
    return Rule(DEFAULT_ONLY, note)


_GPU_COUNT = R("honoured with CUDA GPUs; on a machine without them any value but 1 is refused (CPU runs use "
               "trainer.num_cpu_workers); with colocate_all or colocate_policy_ref every role shares the policy's "
               "devices, so a different ref/critic count is refused; colocated engine actors "
               "(run_engines_locally=true with Ray) take a share of the policy's bundles, others get their own "
               "(generator.num_inference_engines, generator.engine_placement_strategy)")
_DS_CONFIG = R("honoured with trainer.strategy=deepspeed (null: ZeRO-3): passed to deepspeed.initialize; refused "
               "with another strategy, and refused for the keys the trainer sets itself (train_batch_size, "
               "train_micro_batch_size_per_gpu, gradient_accumulation_steps, optimizer, scheduler, "
               "gradient_clipping: their trainer keys say what to set), for ZeRO stages other than 1-3 and for "
               "offloads on CPU; disable_trace_cache turns ZeRO-3 prefetching off as upstream's does")
_SP = R("honoured (Ulysses: all-to-all heads, SDPA on whole sequences, FSDP2 over every rank); refused when it "
         "does not divide the role's worker count, with trainer.use_ray=false, with trainer.strategy=deepspeed and "
         "with trainer.flash_attn=true; sample packing is off for that role (padded rows); the model's head count "
         "must be a multiple (checked when it loads)")
_CPU_OFFLOAD = R("honoured on CUDA GPUs (FSDP2 CPUOffloadPolicy); refused without GPUs, where everything already "
                 "lives in host memory")
_FSDP_SIZE = D("hybrid sharding is not bundled: -1 shards over all ranks")
_OFFLOAD_STEP = D("moving optimizer state to host memory between steps is not bundled")
_VLLM_ONLY = R("passed to vLLM with generator.backend=vllm; refused when set with another backend")

RULES: Dict[str, Rule] = {
    "data.train_data": H(),
    "data.val_data": H(),
    "trainer.placement.colocate_all": H("engine actors (run_engines_locally=true with Ray) share the policy's "
                                        "placement-group bundles, else get bundles of their own; GPU: engines "
                                        "sleep (release memory) while the policy trains; a warning says when "
                                        "there is nothing to release (CPU)"),
    "trainer.placement.colocate_policy_ref": H("differs: the bundled trainer also places the critic on the "
                                               "policy's devices when this is set"),
    "trainer.placement.policy_num_nodes": _GPU_COUNT,
    "trainer.placement.policy_num_gpus_per_node": _GPU_COUNT,
    "trainer.placement.critic_num_nodes": _GPU_COUNT,
    "trainer.placement.critic_num_gpus_per_node": _GPU_COUNT,
    "trainer.placement.ref_num_nodes": _GPU_COUNT,
    "trainer.placement.ref_num_gpus_per_node": _GPU_COUNT,
    "trainer.sequence_parallel_backend": D("only ulysses is bundled; it matters only with a sequence_parallel_size "
                                           "> 1"),
    "trainer.strategy": R("fsdp2 and deepspeed (ZeRO 1-3 on CUDA, or on CPU through DeepSpeed's CPU accelerator "
                          "over gloo) are honoured; fsdp runs FSDP2 too (a warning says so); megatron is refused; "
                          "deepspeed without the deepspeed package is refused with the pip command"),
    "trainer.policy.model.path": H(),
    "trainer.policy.model.lora.rank": H(),
    "trainer.policy.model.lora.alpha": H(),
    "trainer.policy.model.lora.dropout": H(),
    "trainer.policy.model.lora.lora_sync_path": D("the bundled trainer syncs LoRA-merged weights, not adapter folders"),
    "trainer.policy.model.lora.target_modules": H(),
    "trainer.policy.model.lora.exclude_modules": H(),
    "trainer.policy.model.lora.init_method": H("kaiming is PEFT's default; other PEFT init_lora_weights names pass "
                                               "through"),
    "trainer.policy.deepspeed_config": _DS_CONFIG,
    "trainer.policy.optimizer_config.lr": H(),
    "trainer.policy.optimizer_config.adam_betas": H(),
    "trainer.policy.optimizer_config.weight_decay": H(),
    "trainer.policy.optimizer_config.max_grad_norm": H(),
    "trainer.policy.optimizer_config.offload_after_step": _OFFLOAD_STEP,
    "trainer.policy.optimizer_config.num_warmup_steps": H(),
    "trainer.policy.optimizer_config.scheduler": R("built by transformers.get_scheduler; every "
                                                   "SchedulerType name is honoured except cosine_with_min_lr, "
                                                   "cosine_warmup_with_min_lr, warmup_stable_decay (they need "
                                                   "arguments the config has no key for), reduce_lr_on_plateau and "
                                                   "greedy (they step on a metric); unknown names are refused"),
    "trainer.policy.fsdp_config.cpu_offload": _CPU_OFFLOAD,
    "trainer.policy.fsdp_config.reshard_after_forward": R("true/false honoured; an integer (partial resharding) is "
                                                          "refused by the type check"),
    "trainer.policy.fsdp_config.fsdp_size": _FSDP_SIZE,
    "trainer.policy.sequence_parallel_size": _SP,
    "trainer.policy.use_torch_compile": D("torch.compile of the logits is not bundled"),
    "trainer.policy.record_memory": D("CUDA memory snapshots are not bundled"),
    "trainer.policy.model_config_kwargs": H("passed to from_pretrained when the training model loads; trust_remote_code needs SKYRL_GYM_TRUST_REMOTE_CODE=1"),
    "trainer.ref.model.path": H(),
    "trainer.ref.sequence_parallel_size": _SP,
    "trainer.ref.deepspeed_config": _DS_CONFIG,
    "trainer.ref.fsdp_config.cpu_offload": _CPU_OFFLOAD,
    "trainer.ref.fsdp_config.reshard_after_forward": H(),
    "trainer.ref.fsdp_config.fsdp_size": _FSDP_SIZE,
    "trainer.ref.model_config_kwargs": H("passed to from_pretrained when the reference model loads; trust_remote_code needs SKYRL_GYM_TRUST_REMOTE_CODE=1"),
    "trainer.critic.model.path": H(),
    "trainer.critic.model.lora.rank": H(),
    "trainer.critic.model.lora.alpha": H(),
    "trainer.critic.model.lora.dropout": H(),
    "trainer.critic.model.lora.target_modules": H(),
    "trainer.critic.model.lora.exclude_modules": H(),
    "trainer.critic.model.lora.init_method": H(),
    "trainer.critic.deepspeed_config": _DS_CONFIG,
    "trainer.critic.optimizer_config.lr": H(),
    "trainer.critic.optimizer_config.adam_betas": H(),
    "trainer.critic.optimizer_config.weight_decay": H(),
    "trainer.critic.optimizer_config.max_grad_norm": H(),
    "trainer.critic.optimizer_config.offload_after_step": _OFFLOAD_STEP,
    "trainer.critic.optimizer_config.num_warmup_steps": H(),
    "trainer.critic.optimizer_config.scheduler": R("as trainer.policy.optimizer_config.scheduler"),
    "trainer.critic.fsdp_config.cpu_offload": _CPU_OFFLOAD,
    "trainer.critic.fsdp_config.reshard_after_forward": H(),
    "trainer.critic.fsdp_config.fsdp_size": _FSDP_SIZE,
    "trainer.critic.sequence_parallel_size": _SP,
    "trainer.critic.model_config_kwargs": H("passed to from_pretrained when the critic loads; trust_remote_code needs SKYRL_GYM_TRUST_REMOTE_CODE=1"),
    "trainer.algorithm.advantage_estimator": R("grpo, rloo, reinforce++, gae and user-registered names; others "
                                               "refused with the registered list"),
    "trainer.algorithm.kl_ctrl.type": H(),
    "trainer.algorithm.kl_ctrl.kl_target": H(),
    "trainer.algorithm.kl_ctrl.horizon": H(),
    "trainer.algorithm.kl_estimator_type": H("k1, k2, k3, abs"),
    "trainer.algorithm.use_kl_estimator_k3": H("true sets kl_estimator_type=k3 (refused if it contradicts it)"),
    "trainer.algorithm.use_abs_kl": H("true sets kl_estimator_type=abs (refused if it contradicts it)"),
    "trainer.algorithm.use_kl_in_reward": H(),
    "trainer.algorithm.use_kl_loss": H(),
    "trainer.algorithm.kl_loss_coef": H(),
    "trainer.algorithm.use_entropy_loss": H(),
    "trainer.algorithm.entropy_loss_coef": H(),
    "trainer.algorithm.advantage_batch_normalize": H(),
    "trainer.algorithm.value_head_prefix": D("the bundled critic's head is value_head"),
    "trainer.algorithm.policy_loss_type": R("regular, dual_clip, gspo, cispo and user-registered losses; sapo, "
                                            "clip_cov and kl_cov are not bundled and refused"),
    "trainer.algorithm.loss_reduction": H(),
    "trainer.algorithm.grpo_norm_by_std": H(),
    "trainer.algorithm.zero_variance_filter": H(),
    "trainer.algorithm.lambd": H(),
    "trainer.algorithm.gamma": H(),
    "trainer.algorithm.eps_clip_low": H(),
    "trainer.algorithm.eps_clip_high": H(),
    "trainer.algorithm.clip_ratio_c": H(),
    "trainer.algorithm.tis_imp_ratio_cap": H("the TIS weight's cap; use_tis=true with a cap <= 0 is refused"),
    "trainer.algorithm.use_tis": R("honoured (the loss of each token weighted by min(pi_old/pi_rollout, cap)); "
                                   "refused without rollout log-probs (sampling_params.logprobs null/0) or with "
                                   "backend=remote/sglang"),
    "trainer.algorithm.sapo.tau_pos": D("read by the sapo loss, which is not bundled"),
    "trainer.algorithm.sapo.tau_neg": D("read by the sapo loss, which is not bundled"),
    "trainer.algorithm.value_clip": H(),
    "trainer.algorithm.dynamic_sampling.type": H(),
    "trainer.algorithm.dynamic_sampling.max_sample_batches": H(),
    "trainer.algorithm.dynamic_sampling.min_replace_ratio": H(),
    "trainer.algorithm.clip_cov.clip_ratio": D("read by the clip_cov loss, which is not bundled"),
    "trainer.algorithm.clip_cov.clip_cov_lb": D("read by the clip_cov loss, which is not bundled"),
    "trainer.algorithm.clip_cov.clip_cov_ub": D("read by the clip_cov loss, which is not bundled"),
    "trainer.algorithm.kl_cov.kl_cov_frac": D("read by the kl_cov loss, which is not bundled"),
    "trainer.algorithm.kl_cov.ppo_kl_coef": D("read by the kl_cov loss, which is not bundled"),
    "trainer.algorithm.cispo.cispo_eps_clip_low": H(),
    "trainer.algorithm.cispo.cispo_eps_clip_high": H(),
    "trainer.fully_async.max_staleness_steps": D("upstream's fully async trainer is not bundled; see "
                                                 "trainer.async_training (one-step-off)"),
    "trainer.fully_async.num_parallel_generation_workers": D("upstream's fully async trainer is not bundled"),
    "trainer.gradient_checkpointing": H(),
    "trainer.gradient_checkpointing_use_reentrant": H(),
    "trainer.seed": H(),
    "trainer.resume_mode": H(),
    "trainer.resume_path": H(),
    "trainer.ckpt_path": H(),
    "trainer.max_ckpts_to_keep": H(),
    "trainer.ckpt_interval": H(),
    "trainer.hf_save_interval": H("exports every N steps and at the end"),
    "trainer.export_path": H(),
    "trainer.bf16": H("null (ours): bf16 mixed precision on GPU, fp32 on CPU; true adds bf16 autocast on CPU; false: "
                      "fp32 compute"),
    "trainer.epochs": H(),
    "trainer.update_epochs_per_batch": H(),
    "trainer.train_batch_size": H(),
    "trainer.policy_mini_batch_size": H(),
    "trainer.critic_mini_batch_size": H(),
    "trainer.micro_train_batch_size_per_gpu": H(),
    "trainer.micro_forward_batch_size_per_gpu": H(),
    "trainer.update_ref_every_epoch": D("refreshing the reference model from the policy is not bundled"),
    "trainer.use_sample_packing": H(),
    "trainer.eval_batch_size": H(),
    "trainer.eval_before_train": H(),
    "trainer.eval_interval": H(),
    "trainer.max_prompt_length": H("longer prompts are left out, with a warning"),
    "trainer.flash_attn": R("true is honoured with CUDA GPUs and flash-attn installed, refused otherwise; false: SDPA; "
                            "null (ours): flash attention where available"),
    "trainer.disable_fast_tokenizer": H(),
    "trainer.target_modules": D("deprecated upstream; use trainer.policy.model.lora.target_modules"),
    "trainer.exclude_modules": D("deprecated upstream; use trainer.policy.model.lora.exclude_modules"),
    "trainer.project_name": H(),
    "trainer.run_name": H(),
    "trainer.logger": R("console, tensorboard, wandb, jsonl (a list, or comma-separated); others refused"),
    "trainer.dump_data_batch": D("dumping training batches is not bundled"),
    "trainer.dump_eval_results": H("one JSONL per evaluation under <export_path>/dumped_evals (default false here, "
                                   "true upstream)"),
    "trainer.rope_scaling": D("RoPE overrides are not wired into the bundled engines"),
    "trainer.rope_theta": D("RoPE overrides are not wired into the bundled engines"),
    "generator.model_name": R("null or the policy's path (interpolations resolve); another model is refused: the "
                              "engines serve the policy being trained"),
    "generator.model_dtype": R("vLLM's dtype, the HF engine's load dtype; refused (but auto) with remote/sglang, "
                               "whose servers choose theirs"),
    "generator.run_engines_locally": R("true with trainer.use_ray=true: hf/vllm engines are Ray actors in placement "
                                       "groups (the policy's bundles with colocate_all, else their own, "
                                       "generator.engine_placement_strategy), weights broadcast from policy rank 0 "
                                       "across nodes; null (ours) and true without Ray: engines in the trainer's "
                                       "process; true is refused with remote/sglang, false with hf/vllm (use "
                                       "backend=remote with remote_inference_engine_urls)"),
    "generator.num_inference_engines": R("engine actors (run_engines_locally=true with Ray): that many actors; in "
                                         "the trainer's process any value but 1 is refused (more would be copies "
                                         "of one model there); with remote/sglang it must be 1 or the number of "
                                         "URLs"),
    "generator.backend": R("hf, vllm, remote, sglang"),
    "generator.weight_sync_backend": R("auto, inprocess, shm, gloo, nccl, checkpoint; nccl is refused without CUDA "
                                       "GPUs, shm needs hf with Ray workers, cuda_ipc is not bundled; engine actors "
                                       "(run_engines_locally=true with Ray) take the broadcast from policy rank 0 "
                                       "(auto) or checkpoint, and refuse inprocess and shm (and nccl when "
                                       "colocated)"),
    "generator.weight_transfer_threshold_cuda_ipc_GB": D("read by cuda_ipc weight sync, which is not bundled"),
    "generator.inference_engine_tensor_parallel_size": R("honoured with vllm (engine actors of their own get "
                                                         "that many GPUs per bundle; colocated ones refuse >1); "
                                                         "with other backends any value but 1 is refused"),
    "generator.inference_engine_pipeline_parallel_size": D("pipeline-parallel engines are not bundled"),
    "generator.inference_engine_expert_parallel_size": D("expert-parallel engines are not bundled"),
    "generator.inference_engine_data_parallel_size": D("use generator.num_inference_engines"),
    "generator.n_samples_per_prompt": H(),
    "generator.async_engine": D("the bundled engines are asyncio engines (true)"),
    "generator.batched": R("honoured; true needs generator.max_turns=1"),
    "generator.max_input_length": H(),
    "generator.vllm_v1_disable_multiproc": R("the bundled vLLM engine runs in-process: null/true honoured, false "
                                             "refused; refused when set with another backend"),
    "generator.enable_prefix_caching": _VLLM_ONLY,
    "generator.enable_chunked_prefill": _VLLM_ONLY,
    "generator.max_num_batched_tokens": _VLLM_ONLY,
    "generator.enforce_eager": R("honoured with vllm; false is refused with other backends"),
    "generator.fully_sharded_loras": D("LoRA weights reach the engines merged"),
    "generator.gpu_memory_utilization": R("honoured with vllm; above 0.5 refused on a GPU with "
                                          "trainer.use_ray=false (the policy shares the GPU); any value but "
                                          "the default is refused with other backends"),
    "generator.max_num_seqs": _VLLM_ONLY,
    "generator.remote_inference_engine_urls": R("used by backend=remote/sglang; refused when set with hf/vllm"),
    "generator.enable_http_endpoint": D("an HTTP endpoint over the engines is not bundled"),
    "generator.http_endpoint_host": D("read only with enable_http_endpoint, which is refused"),
    "generator.http_endpoint_port": D("read only with enable_http_endpoint, which is refused"),
    "generator.max_turns": H(),
    "generator.chat_template.source": H("file: name_or_path is a Jinja file used as the chat template"),
    "generator.chat_template.name_or_path": R("with source=file honoured; with source=name only null (the "
                                              "tokenizer's template): named templates are not bundled"),
    "generator.chat_template_kwargs": H(),
    "generator.engine_init_kwargs": _VLLM_ONLY,
    "generator.override_existing_update_group": D("the weight-sync group is created fresh for each run (auto)"),
    "generator.sampling_params.max_generate_length": H(),
    "generator.sampling_params.repetition_penalty": D("the bundled engines sample without a repetition penalty"),
    "generator.sampling_params.temperature": H(),
    "generator.sampling_params.top_p": H(),
    "generator.sampling_params.min_p": H(),
    "generator.sampling_params.top_k": H(),
    "generator.sampling_params.logprobs": R("null/0/1: whether the sampled token's log-prob is recorded; >1 refused "
                                            "(top-k log-probs are not returned)"),
    "generator.sampling_params.stop": H(),
    "generator.use_conversation_multi_turn": H(),
    "generator.append_eos_token_after_stop_str_in_multi_turn": H(),
    "generator.eval_sampling_params.max_generate_length": H(),
    "generator.eval_sampling_params.repetition_penalty": D("the bundled engines sample without a repetition penalty"),
    "generator.eval_sampling_params.temperature": H(),
    "generator.eval_sampling_params.top_p": H(),
    "generator.eval_sampling_params.min_p": H(),
    "generator.eval_sampling_params.top_k": H(),
    "generator.eval_sampling_params.logprobs": R("as generator.sampling_params.logprobs"),
    "generator.eval_sampling_params.stop": H(),
    "generator.eval_n_samples_per_prompt": H(),
    "generator.zero_reward_on_non_stop": H(),
    "generator.apply_overlong_filtering": H(),
    "generator.rope_scaling": D("RoPE overrides are not wired into the bundled engines"),
    "generator.rope_theta": D("RoPE overrides are not wired into the bundled engines"),
    "generator.step_wise_trajectories": D("the bundled trainer trains one sample per trajectory"),
    "environment.env_class": R("checked against the env registry (and every dataset row's env_class) before the "
                               "first step: an unknown id is an error with close matches"),
    "environment.skyrl_gym.max_env_workers": H("threads for env calls (0: none)"),
    "environment.skyrl_gym.text2sql.db_path": H("reaches the text2sql env as env_config.db_path"),
    "environment.skyrl_gym.llm_as_a_judge.model": H("reaches the llm_as_a_judge env (register one under that id) as "
                                                    "env_config.model"),
    "environment.skyrl_gym.llm_as_a_judge.base_url": H("as env_config.base_url"),
    "environment.skyrl_gym.search.log_requests": H("reaches the search env as env_config.log_requests"),
    "environment.skyrl_gym.search.search_url": H("as env_config.search_url"),
    "environment.skyrl_gym.search.topk": H("as env_config.topk"),
    "environment.skyrl_gym.search.timeout": H("as env_config.timeout"),
}


def get_path(obj: Any, key: str) -> Any:
    """``obj.a.b.c`` (attributes, or items of dicts) for ``key="a.b.c"``; ``None`` when a step is missing."""
    for part in key.split("."):
        if obj is None:
            return None
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def default_only_problems(cfg: Any) -> List[str]:
    """A problem for every ``DEFAULT_ONLY`` key set to anything but its default."""
    defaults = type(cfg)()
    problems = []
    for key, rule in RULES.items():
        if rule.status != DEFAULT_ONLY or key.startswith("environment.skyrl_gym."):
            continue
        if key.startswith("generator.eval_sampling_params.") and cfg.generator.eval_sampling_params is None:
            continue
        value = get_path(cfg, key)
        default = get_path(defaults, key)
        if default is None and key.startswith("generator.eval_sampling_params."):
            default = get_path(defaults, key.replace("eval_sampling_params", "sampling_params"))
        if value != default:
            problems.append(f"{key}={_show(value)}: not supported by the bundled trainer ({rule.note}); "
                            f"leave it at {_show(default)}")
    return problems


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def upstream_keys(path: str) -> List[str]:
    """The leaf keys of upstream's ``ppo_base_config.yaml`` (plus its ``environment.skyrl_gym`` defaults)."""
    import yaml

    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    data.pop("defaults", None)
    keys = list(_flat(data))
    return keys


def _flat(data: Dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def render(upstream_yaml: Optional[str] = None) -> str:
    """The compatibility table (markdown). With upstream's YAML, fail unless the table covers exactly its keys."""
    if upstream_yaml is not None:
        theirs = set(upstream_keys(upstream_yaml))
        ours = {k for k in RULES if not k.startswith("environment.skyrl_gym.")}
        if theirs != ours:
            raise SystemExit(f"the table is out of step with {upstream_yaml}: missing {sorted(theirs - ours)}, "
                             f"extra {sorted(ours - theirs)}")
    counts: Dict[str, int] = {}
    for rule in RULES.values():
        counts[rule.status] = counts.get(rule.status, 0) + 1
    main_keys = sum(1 for k in RULES if not k.startswith("environment.skyrl_gym."))
    lines = [
        f"Every key of {UPSTREAM}'s `ppo_base_config.yaml` ({main_keys} keys) and of its `environment.skyrl_gym` "
        f"defaults ({len(RULES) - main_keys} keys), and what the bundled trainer does with it. **honoured**: the key "
        "does what it does upstream. **refused (when ...)**: `load_config` and `skyrl-gym train --check` stop with "
        "the key, the reason and the fix in the cases the note gives, and honour it otherwise. **default only**: "
        "any value but the default shown is refused with the reason. No key is accepted and ignored.",
        "",
        f"Totals: {counts.get(HONOURED, 0)} honoured, {counts.get(REFUSED, 0)} honoured with some values refused, "
        f"{counts.get(DEFAULT_ONLY, 0)} default only.",
        "",
        "| key | status | note |",
        "|---|---|---|",
    ]
    for key, rule in RULES.items():
        status = {HONOURED: "honoured", REFUSED: "honoured; refused when noted",
                  DEFAULT_ONLY: f"default only (`{_default_text(key)}`)"}[rule.status]
        lines.append(f"| `{key}` | {status} | {rule.note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _default_text(key: str) -> str:
    from skygym_train.config.schema import SkyRLTrainConfig

    value = get_path(SkyRLTrainConfig(), key)
    if value is None and key.startswith("generator.eval_sampling_params."):
        value = get_path(SkyRLTrainConfig(), key.replace("eval_sampling_params", "sampling_params"))
    return _show(value)


DOCS_START = "<!-- skyrl-train-keys:start -->\n"
DOCS_END = "<!-- skyrl-train-keys:end -->"
DOCS_HEADING = "## SkyRL-train configuration keys\n\n"


def write_docs(path: str, table: str) -> None:
    """Replace this module's section of ``path`` (between its markers), leaving the rest of the page alone."""
    from pathlib import Path

    page = Path(path)
    text = page.read_text(encoding="utf-8") if page.exists() else "# Compatibility with SkyRL\n\n"
    if DOCS_START in text and DOCS_END in text:
        head, rest = text.split(DOCS_START, 1)
        tail = rest.split(DOCS_END, 1)[1]
    else:
        head, tail = text.rstrip("\n") + "\n\n" + DOCS_HEADING, "\n"
    page.write_text(head + DOCS_START + table + DOCS_END + tail, encoding="utf-8")


def _main(argv: List[str]) -> int:
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m skygym_train.config.compat", description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", help="SkyRL-train 0.3.1's ppo_base_config.yaml, to check the table against")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/compat.md")
    args = parser.parse_args(argv)
    if args.upstream is not None and not Path(args.upstream).is_file():
        print(f"error: --upstream {args.upstream}: no such file; it is skyrl_train/config/ppo_base_config.yaml in "
              "the skyrl-train 0.3.1 wheel (pip download --no-deps --python-version 3.12 skyrl-train==0.3.1, then "
              "unzip it)", file=sys.stderr)
        return 2
    table = render(args.upstream)
    if args.write_docs:
        docs = Path(__file__).resolve().parents[2] / "docs" / "compat.md"
        before = docs.read_text(encoding="utf-8") if docs.exists() else None
        write_docs(str(docs), table)
        checked = f", checked against {args.upstream}" if args.upstream else ""
        print(f"{docs}: {'up to date' if docs.read_text(encoding='utf-8') == before else 'table written'}{checked}")
    else:
        print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
