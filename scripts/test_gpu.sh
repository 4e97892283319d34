#!/usr/bin/env bash
# The GPU test session: the trainer's and the adapters' tests with CUDA present (README, "Tests on a GPU").
#   bash scripts/test_gpu.sh                      # with python3 (the project installed with [dev,train,deepspeed])
#   PYTHON=.venv/bin/python bash scripts/test_gpu.sh -x -k fsdp   # pytest arguments pass through
# Without a CUDA GPU it says so and exits 0 (CI has none). Tests that need what the machine lacks skip with the
# reason: Ray or vLLM not installed, no flash-attn, one GPU where two are needed, the embedded model absent (set
# SKYRL_GYM_TINY_MODEL to a folder written by skygym_adapters.models.build_tiny_model to run those that only
# need its tokenizer).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu tests skipped: no CUDA GPU visible to $PY (torch.cuda.is_available() is false); run this on a" \
       "machine with one"
  exit 0
fi
"$PY" -c "import torch; print('gpu tests on', torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())"
export RAY_AUTH_MODE=disabled TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
# The engines decode eagerly here: compiling each test's decode step would cost tens of seconds per test (the test
# of the compiled step asks for it). Inductor's compile workers: two per test worker, not one per core each.
export SKYRL_GYM_HF_COMPILE_DECODE="${SKYRL_GYM_HF_COMPILE_DECODE:-0}"
export TORCHINDUCTOR_COMPILE_THREADS="${TORCHINDUCTOR_COMPILE_THREADS:-2}"
# cuBLAS's deterministic mode, for the tests that compare two training runs exactly (the deterministic_kernels
# fixture)
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"
# slow tests included (tests/skygym_train/test_gpu.py is marked slow); the vllm/verl/trl sessions and Docker are not
# GPU work. A few pytest-xdist workers share the GPU (each test's model is small), a file each at a time: the CPU
# suite's grouping keeps all of tests/skygym_train in one worker, for its one Ray cluster, which a GPU machine
# without Ray does not need.
exec "$PY" -m pytest -ra -p no:cacheprovider -m "not vllm and not verl and not trl and not docker" \
  -n "${SKYRL_GYM_TEST_WORKERS:-4}" --dist loadfile tests/skygym_train tests/adapters "$@"
