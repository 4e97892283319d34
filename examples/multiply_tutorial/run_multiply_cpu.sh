set -x

# The tutorial on a CPU machine: the embedded SmolLM2-135M-Instruct, the HF engine, a few small steps.
#   python examples/multiply_tutorial/multiply_dataset.py --output_dir /tmp/data/multiply --num_digits 1 \
#       --train_size 64 --test_size 8
#   DATA_DIR=/tmp/data/multiply bash examples/multiply_tutorial/run_multiply_cpu.sh

DATA_DIR="${DATA_DIR:-$HOME/data/multiply}"

# the repository root on the module path: `python -m examples....` works from any folder
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
ENTRY=(python -m examples.multiply_tutorial.main_multiply)
if [ "${1:-}" = "--check" ]; then ENTRY=(python -m skygym_train.entrypoints.main_base --check); shift; fi

"${ENTRY[@]}" \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/validation.parquet']" \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.policy.model.path="smollm2-135m" \
  trainer.placement.colocate_all=false \
  trainer.strategy=fsdp2 \
  trainer.max_training_steps=2 \
  trainer.train_batch_size=2 \
  trainer.policy_mini_batch_size=2 \
  trainer.micro_forward_batch_size_per_gpu=4 \
  trainer.micro_train_batch_size_per_gpu=4 \
  trainer.eval_batch_size=8 \
  trainer.eval_before_train=false \
  trainer.eval_interval=-1 \
  trainer.ckpt_interval=-1 \
  trainer.resume_mode=none \
  trainer.gradient_checkpointing=false \
  generator.sampling_params.max_generate_length=48 \
  generator.max_turns=5 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  generator.backend=hf \
  generator.weight_sync_backend=auto \
  generator.batched=false \
  environment.env_class=multiply \
  generator.n_samples_per_prompt=2 \
  trainer.logger=console \
  trainer.progress_bar=false \
  trainer.project_name="multiply" \
  trainer.run_name="multiply_cpu" \
  "$@"
