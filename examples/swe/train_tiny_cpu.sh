#!/usr/bin/env bash
# A tiny GRPO run on SWE tasks on CPU with the embedded SmolLM2-135M: steps of two instances x two samples, three
# turns per episode (with ROWS of two rows, one step per epoch). The reward stays 0 with a model this small; the point
# is the pipeline: containers per trajectory, tools, grading in fresh containers, rewards into the trainer.
# Measured on a 2-core machine under heavy load (load average 9-14): one step in 18.6 min (generation 936 s,
# env 68 s, training 179 s), exit 0; on a quiet one, well under a minute a step. generator.max_turns=3 cuts the
# rows' 8 turns to three on purpose: the trainer's line saying so at the start is expected here.
#   bash examples/swe/run_eval.sh                  # builds outputs/swe/rows.jsonl first
#   bash examples/swe/train_tiny_cpu.sh
set -euo pipefail
ROWS="${ROWS:-outputs/swe/rows.jsonl}"

python -m skygym_train.entrypoints.main_base \
  data.train_data="['$ROWS']" \
  data.val_data="['$ROWS']" \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.policy.model.path=smollm2-135m \
  trainer.strategy=fsdp2 \
  trainer.epochs=2 \
  trainer.max_training_steps=2 \
  trainer.train_batch_size=2 \
  trainer.policy_mini_batch_size=2 \
  trainer.micro_forward_batch_size_per_gpu=2 \
  trainer.micro_train_batch_size_per_gpu=2 \
  trainer.eval_before_train=false \
  trainer.eval_interval=-1 \
  trainer.ckpt_interval=-1 \
  trainer.resume_mode=none \
  trainer.max_prompt_length=4096 \
  generator.sampling_params.max_generate_length=96 \
  generator.max_turns=3 \
  generator.n_samples_per_prompt=2 \
  generator.backend=hf \
  environment.env_class=swe \
  environment.env_config.output_cap=1500 \
  environment.env_config.bash_timeout_s=20 \
  trainer.logger=console \
  trainer.project_name=swe \
  trainer.run_name=swe_tiny_cpu \
  "$@"
