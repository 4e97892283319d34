set -x
# DAPO on GSM8K with the plug-in in main_dapo.py (clip-higher, dynamic sampling, token-level loss,
# overlong filtering, soft overlong punishment). Same cluster shape as examples/gsm8k/run_gsm8k.sh.
: "${DATA_DIR:="$HOME/data/gsm8k"}"
: "${NUM_GPUS:=4}"
: "${LOGGER:=wandb}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
python "$ROOT/examples/algorithms/dapo/main_dapo.py" \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/validation.parquet']" \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.algorithm.policy_loss_type=dual_clip \
  trainer.algorithm.eps_clip_low=0.2 \
  trainer.algorithm.eps_clip_high=0.28 \
  trainer.algorithm.clip_ratio_c=10.0 \
  trainer.algorithm.dynamic_sampling.type=filter \
  trainer.algorithm.dynamic_sampling.max_sample_batches=30 \
  trainer.algorithm.loss_reduction=token_mean \
  trainer.algorithm.overlong_buffer_len=512 \
  trainer.algorithm.overlong_buffer_penalty_factor=1.0 \
  trainer.algorithm.use_kl_loss=false \
  generator.apply_overlong_filtering=true \
  generator.sampling_params.max_generate_length=1024 \
  trainer.policy.model.path="Qwen/Qwen2.5-1.5B-Instruct" \
  trainer.placement.colocate_all=true \
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \
  generator.num_inference_engines=1 \
  generator.backend=vllm \
  trainer.train_batch_size=512 \
  trainer.policy_mini_batch_size=128 \
  trainer.micro_train_batch_size_per_gpu=16 \
  trainer.micro_forward_batch_size_per_gpu=32 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.policy.optimizer_config.weight_decay=0.1 \
  environment.env_class=gsm8k \
  generator.n_samples_per_prompt=8 \
  trainer.logger="$LOGGER" \
  trainer.project_name=gsm8k \
  trainer.run_name=gsm8k_dapo \
  trainer.ckpt_path="$HOME/ckpts/gsm8k_dapo" \
  "$@"
