#!/usr/bin/env bash
# GRPO on GSM8K with veRL, the episodes played by skyrl_gym envs. Needs GPUs and vLLM (veRL's rollout:
# pip install 'verl[vllm]==0.9.1' after pip install -e '.[verl]', in the same virtual environment);
# on a CPU-only machine use examples/verl/dry_run.py to check the data, agent loop and rewards instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
DATA="${DATA:-$HOME/data/skyrl_gym/gsm8k_multi_turn}"
MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
N_GPUS="${N_GPUS:-1}"

# veRL's trainer waits for GPUs without a word where there are none: say so, and what to run instead
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.device_count() >= max(1, int(sys.argv[1])) else 1)" "$N_GPUS"; then
  echo "run_gsm8k.sh needs CUDA GPUs (N_GPUS=$N_GPUS, at least 1) and vLLM for veRL's rollout; this machine has fewer GPUs." >&2
  echo "On a CPU-only machine, check the data, agent loop and rewards with: python examples/verl/dry_run.py --help" >&2
  exit 2
fi

python examples/verl/prepare_gsm8k.py --env gsm8k_multi_turn --max_turns 3 --output_dir "$DATA" ${GSM8K_DIR:+--train_file "$GSM8K_DIR/train.jsonl" --test_file "$GSM8K_DIR/test.jsonl"}

SKYRL_GYM_VERL_AGENT_LOOP="$ROOT/examples/verl/agent_loop.yaml" python -m verl.trainer.main_ppo \
  --config-path "$ROOT/examples/verl" --config-name gsm8k_multi_turn \
  data.train_files="$DATA/train.parquet" data.val_files="$DATA/test.parquet" \
  actor_rollout_ref.model.path="$MODEL" \
  trainer.n_gpus_per_node="$N_GPUS" "$@"
