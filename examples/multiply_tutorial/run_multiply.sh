set -x

# GRPO on the tutorial's multiply env with the bundled trainer: SkyRL-train's tutorial run script with
# `skyrl_train` replaced by `skygym_train` (see README.md for the settings that differ).
#   python examples/multiply_tutorial/multiply_dataset.py --output_dir $HOME/data/multiply
#   bash examples/multiply_tutorial/run_multiply.sh            # one GPU, vLLM
#   bash examples/multiply_tutorial/run_multiply.sh --check    # only validate (prints every refused setting)

DATA_DIR="${DATA_DIR:-$HOME/data/multiply}"
NUM_GPUS="${NUM_GPUS:-1}"

# the repository root on the module path: `python -m examples....` works from any folder
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
ENTRY=(python -m examples.multiply_tutorial.main_multiply)
if [ "${1:-}" = "--check" ]; then ENTRY=(python -m skygym_train.entrypoints.main_base --check); shift; fi

"${ENTRY[@]}" \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/validation.parquet']" \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.policy.model.path="Qwen/Qwen2.5-1.5B-Instruct" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp2 \
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \
  trainer.placement.ref_num_gpus_per_node=$NUM_GPUS \
  generator.num_inference_engines=1 \
  generator.inference_engine_tensor_parallel_size=1 \
  trainer.epochs=20 \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=1024 \
  trainer.policy_mini_batch_size=256 \
  trainer.critic_mini_batch_size=256 \
  trainer.micro_forward_batch_size_per_gpu=64 \
  trainer.micro_train_batch_size_per_gpu=64 \
  trainer.eval_batch_size=1024 \
  trainer.eval_before_train=true \
  trainer.eval_interval=5 \
  trainer.ckpt_interval=10 \
  trainer.max_prompt_length=512 \
  generator.sampling_params.max_generate_length=1024 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.algorithm.use_kl_loss=true \
  generator.backend=vllm \
  generator.run_engines_locally=true \
  generator.weight_sync_backend=auto \
  generator.async_engine=true \
  generator.batched=false \
  generator.max_turns=5 \
  environment.env_class=multiply \
  generator.n_samples_per_prompt=5 \
  generator.gpu_memory_utilization=0.8 \
  trainer.logger="wandb" \
  trainer.project_name="multiply" \
  trainer.run_name="multiply_test" \
  "$@"
