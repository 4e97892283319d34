set -x

# Colocated GRPO training + generation for Qwen2.5-1.5B-Instruct on GSM8K (the shape of SkyRL's script).
#
#   python examples/gsm8k/gsm8k_dataset.py --output_dir $HOME/data/gsm8k
#   bash examples/gsm8k/run_gsm8k.sh                      # 4 GPUs, vLLM engines, NCCL weight sync
#   NUM_GPUS=1 INFERENCE_BACKEND=hf LOGGER=console bash examples/gsm8k/run_gsm8k.sh   # one GPU, no vLLM
#
# Any key can be appended as an extra argument, e.g. `trainer.epochs=1`.
# One engine, a Ray actor on the policy's GPU bundles (generator.run_engines_locally=true with colocate_all);
# upstream's script starts one per GPU.

: "${DATA_DIR:="$HOME/data/gsm8k"}"
: "${NUM_GPUS:=4}"
: "${LOGGER:=wandb}"  # console, tensorboard, jsonl, wandb (offline without an API key); comma-separate several
: "${INFERENCE_BACKEND:=vllm}"
: "${WEIGHT_SYNC:=auto}"  # auto: nccl for vllm on GPU, in-process for hf

python -m skygym_train.entrypoints.main_base \
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
  trainer.eval_batch_size=1024 \
  trainer.eval_before_train=true \
  trainer.eval_interval=5 \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=1024 \
  trainer.policy_mini_batch_size=256 \
  trainer.micro_forward_batch_size_per_gpu=64 \
  trainer.micro_train_batch_size_per_gpu=64 \
  trainer.ckpt_interval=10 \
  trainer.max_prompt_length=512 \
  generator.sampling_params.max_generate_length=1024 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.algorithm.use_kl_loss=true \
  generator.backend=$INFERENCE_BACKEND \
  generator.run_engines_locally=true \
  generator.weight_sync_backend=$WEIGHT_SYNC \
  environment.env_class=gsm8k \
  generator.n_samples_per_prompt=5 \
  generator.gpu_memory_utilization=0.8 \
  trainer.logger="$LOGGER" \
  trainer.project_name="gsm8k" \
  trainer.run_name="gsm8k_test" \
  trainer.resume_mode=null \
  trainer.log_path="/tmp/skyrl-logs" \
  trainer.ckpt_path="$HOME/ckpts/gsm8k_1.5B_ckpt" \
  "$@"
