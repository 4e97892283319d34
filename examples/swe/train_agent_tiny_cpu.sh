#!/usr/bin/env bash
# A tiny GRPO run on SWE tasks through the agent layer (generator.task: the AgentRunner is the trainer's generator)
# on CPU with the embedded SmolLM2-135M: steps of two instances x two trajectories, three assistant turns each, the
# pipelined dispatcher overlapping container starts, generation and grading. The reward stays 0 with a model this
# small; the point is the pipeline end to end. Same rows as train_tiny_cpu.sh (the env-loop version).
#   bash examples/swe/run_eval.sh                        # builds outputs/swe/rows.jsonl first
#   bash examples/swe/train_agent_tiny_cpu.sh --check    # the configuration only (loads no model)
#   bash examples/swe/train_agent_tiny_cpu.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROWS="${ROWS:-outputs/swe/rows.jsonl}"
ENTRY=(python -m skygym_train.entrypoints.main_base)
if [ "${1:-}" = "--check" ]; then ENTRY+=(--check); shift; fi

"${ENTRY[@]}" \
  generator.task="$HERE/swe_agent_tiny.yaml" \
  data.train_data="['$ROWS']" \
  data.val_data="['$ROWS']" \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.policy.model.path=smollm2-135m \
  trainer.use_ray=false \
  trainer.strategy=fsdp2 \
  trainer.epochs=2 \
  trainer.max_training_steps=1 \
  trainer.train_batch_size=2 \
  trainer.policy_mini_batch_size=2 \
  trainer.micro_forward_batch_size_per_gpu=2 \
  trainer.micro_train_batch_size_per_gpu=2 \
  trainer.eval_before_train=false \
  trainer.eval_interval=-1 \
  trainer.ckpt_interval=-1 \
  trainer.resume_mode=none \
  trainer.max_prompt_length=4096 \
  generator.backend=hf \
  generator.n_samples_per_prompt=2 \
  trainer.logger=console \
  trainer.project_name=swe \
  trainer.run_name=swe_agent_tiny_cpu \
  "$@"
