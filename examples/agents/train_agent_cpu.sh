#!/usr/bin/env bash
# GRPO with the bundled trainer, the agent layer's runner as its generator (generator.task): a ReAct agent with a
# Python tool (the code_interpreter env, sandboxed, offline) learning one-digit products, on CPU with the embedded
# SmolLM2-135M-Instruct. Each step: 4 questions x 4 samples, up to 3 assistant turns each; reward 1.0 for the right
# \boxed{} product. Each step's console line: reward/mean policy/loss policy/entropy policy/grad_norm and timings
# (reward/mean: the mean reward of the step's 16 trajectories). Every metric, the agent's rollout/agent/avg_reward
# included, is in metrics.jsonl with trainer.logger=console,jsonl (under trainer.log_path/trainer.run_name).
#   bash examples/agents/train_agent_cpu.sh             # STEPS=4 by default; DATA_DIR=/tmp/data/agent_multiply
#   bash examples/agents/train_agent_cpu.sh --check     # check the configuration only (loads no model)
#   bash examples/agents/train_agent_cpu.sh trainer.max_training_steps=8   # any trainer key on top
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA_DIR="${DATA_DIR:-/tmp/data/agent_multiply}"
STEPS="${STEPS:-4}"

if [ ! -f "$DATA_DIR/train.jsonl" ]; then
  python "$HERE/make_rows.py" --out "$DATA_DIR" --train 64 --val 16
fi
ENTRY=(python -m skygym_train.entrypoints.main_base)
if [ "${1:-}" = "--check" ]; then ENTRY+=(--check); shift; fi

"${ENTRY[@]}" \
  generator.task="$HERE/multiply_tool_agent.yaml" \
  data.train_data="['$DATA_DIR/train.jsonl']" \
  data.val_data="['$DATA_DIR/validation.jsonl']" \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.policy.model.path=smollm2-135m \
  trainer.use_ray=false \
  trainer.strategy=fsdp2 \
  trainer.max_training_steps="$STEPS" \
  trainer.train_batch_size=4 \
  trainer.policy_mini_batch_size=4 \
  trainer.micro_forward_batch_size_per_gpu=8 \
  trainer.micro_train_batch_size_per_gpu=8 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.gradient_checkpointing=false \
  trainer.eval_batch_size=16 \
  trainer.eval_before_train=false \
  trainer.eval_interval=-1 \
  trainer.ckpt_interval=-1 \
  trainer.resume_mode=none \
  generator.backend=hf \
  generator.n_samples_per_prompt=4 \
  generator.sampling_params.temperature=1.0 \
  trainer.logger=console \
  trainer.progress_bar=false \
  trainer.project_name=agents \
  trainer.run_name=agent_multiply_cpu \
  "$@"
