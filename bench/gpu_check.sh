#!/usr/bin/env bash
# The GPU checks in one call: the bundled trainer beside TRL on the same GPU, then the GPU test session.
#   bash bench/gpu_check.sh                    # 0.5B at 128 and 1.5B at 512 new tokens, then the tests
#   bash bench/gpu_check.sh tests 05b-128      # only these parts: tests, sync, and benches <size>-<new tokens>
#                                              # with size tiny (a tiny random Qwen2), 05b or 15b (Qwen2.5-0.5B's
#                                              # or 1.5B's shape, random weights), e.g. 05b-512, 15b-128
#   bash bench/gpu_check.sh 15b-512-fsdp       # a bench with -fsdp: ours alone, the policy wrapped with FSDP2 on
#                                              # the one GPU (fsdp_config.shard_one_gpu): bf16 mixed precision
#                                              # against the default autocast, where memory is short
#   bash bench/gpu_check.sh layouts-15b-512    # one training micro-batch (2 prompts x 8 answers of 512 tokens)
#                                              # in each packing layout (bench/packing_layouts.py): whether the
#                                              # trainer's cut of long shared-prompt rows pays on the GPU too,
#                                              # with each layout's peak memory; layouts-15b-512-transformers: the
#                                              # same with the model as transformers runs it (its SDPA, every MLP
#                                              # activation kept, the logits made), for an A/B of the trainer's memory cuts
#   bash bench/gpu_check.sh logprobs-15b-512   # the log-prob step of one micro-batch of the 15b-512 bench three ways
#                                              # (bench/log_prob_memory.py): from the LM head, from the logits in the
#                                              # trainer's chunks, from the logits in 4096-token chunks; peak memory
#   bash bench/gpu_check.sh borrow-15b-640     # one training micro-batch (16 x 640 tokens) reading autocast's casts
#                                              # of the weights, then the engine's bf16 copy (bench/borrowed_weights.py)
# Each part runs under its own time limit (GPU_CHECK_TEST_S, GPU_CHECK_BENCH_S, GPU_CHECK_BENCH_15B_S seconds)
# so one slow part cannot eat the others' time: at most ~420 + 120 + 180 + 300 s, plus building each random model
# (under its own limit) before its bench's clock starts. Seen on one H200 (16 cores): tests 211 s on 12 workers,
# 05b-128 130 s and 15b-512 219 s with their models' builds. Where one command may run at most 600 s, split the
# parts over two calls: `05b-128 15b-512`, then `tests` (each bench's split times the weight sync as well; `sync`
# times it on its own). What each printed lands in $OUT (default ./gpu-check):
# gpu_tests.log (one line per test as it ends, so a part cut off by its limit still says what ran), sync.log,
# bench_<part>.log and bench_<part>.json. A summary of every part is printed at the end. Needs a CUDA GPU, the
# project's [train,deepspeed] dependencies and TRL in this Python; SKYRL_GYM_TINY_MODEL (a folder with the SmolLM2
# tokenizer) stands in for the embedded model where that is not installed.
# GPU_CHECK_DEVICE=cpu runs the same parts on the CPU (with `sync` on GPU_CHECK_SYNC_MODEL, e.g. tiny): a check of
# this script's plumbing before a device call (tests/skygym_train/test_gpu_check_script.py), not of the GPU.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/gpu-check}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
SYNC_MODEL="${GPU_CHECK_SYNC_MODEL:-random-qwen2.5-0.5b}"
TEST_S="${GPU_CHECK_TEST_S:-420}"
BENCH_S="${GPU_CHECK_BENCH_S:-180}"
BENCH_15B_S="${GPU_CHECK_BENCH_15B_S:-300}"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(05b-128 15b-512 tests)  # the benches time the weight sync too
for part in "${parts[@]}"; do  # every part known before any runs
  if ! [[ "$part" =~ ^(tests|sync|(tiny|05b|15b)-[0-9]+(-fsdp)?|layouts-(tiny|05b|15b)-[0-9]+(-transformers)?|(logprobs|borrow)-(tiny|05b|15b)-[0-9]+)$ ]]
  then
    echo "unknown part $part (tests, sync, <tiny|05b|15b>-<new tokens>[-fsdp], e.g. 05b-128," \
         "layouts-<tiny|05b|15b>-<answer tokens>[-transformers], logprobs-<tiny|05b|15b>-<answer tokens> or" \
         "borrow-<tiny|05b|15b>-<tokens>)" >&2
    exit 2
  fi
done
mkdir -p "$OUT"
summary=()
start=$SECONDS
for part in "${parts[@]}"; do
  t0=$SECONDS
  case "$part" in
    tests)
      # some tests run commands as a user's environment has them: `python`, and `skyrl-gym`, which an install with
      # `pip --target` (the device's) leaves beside the packages, off PATH
      bin="$(mktemp -d)"; ln -s "$(command -v "$PY")" "$bin/python"; path="$bin"
      for dir in ${PYTHONPATH:+${PYTHONPATH//:/ }}; do [ -x "$dir/bin/skyrl-gym" ] && path="$path:$dir/bin"; done
      timeout -k 10 "$TEST_S" env PATH="$path:$PATH" PYTHON="$PY" SKYRL_GYM_TEST_WORKERS="${SKYRL_GYM_TEST_WORKERS:-12}" \
        bash scripts/test_gpu.sh -v --timeout 150 > "$OUT/gpu_tests.log" 2>&1
      rc=$?
      summary+=("tests (rc $rc, $((SECONDS - t0))s): $(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)|skipped: no CUDA' \
        "$OUT/gpu_tests.log" | tail -1)")
      ;;
    sync)
      # the policy and a bf16 HF engine in one process on the GPU: one device-side copy per sync
      timeout -k 10 120 "$PY" bench/inprocess_sync.py --device "$DEVICE" --model "$SYNC_MODEL" --syncs 5 \
        > "$OUT/sync.log" 2>&1
      rc=$?
      summary+=("sync (rc $rc, $((SECONDS - t0))s): $(grep '^device' "$OUT/sync.log")")
      ;;
    logprobs-*)
      # the log-prob step of one training micro-batch three ways (bench/log_prob_memory.py): memory and time
      rest=${part#logprobs-}; size=${rest%%-*}; tokens=${rest#*-}
      case "$size" in
        tiny) shape=(--hidden 64 --rows 8) ;;
        05b) shape=(--hidden 896 --rows 32) ;;
        15b) shape=(--hidden 1536 --rows 16) ;;
      esac
      timeout -k 10 120 "$PY" bench/log_prob_memory.py --device "$DEVICE" "${shape[@]}" --tokens "$tokens" \
        > "$OUT/$part.log" 2>&1
      rc=$?
      summary+=("$part (rc $rc, $((SECONDS - t0))s): $(grep -E '^from the' "$OUT/$part.log" | sed -E 's/ +/ /g' \
        | tr '\n' ';')")
      ;;
    borrow-*)
      # one training micro-batch under bf16 autocast, reading autocast's casts or the engine's bf16 copy
      # (bench/borrowed_weights.py): the casts made and CUDA's peak, each way
      rest=${part#borrow-}; size=${rest%%-*}; tokens=${rest#*-}
      case "$size" in
        tiny) model=tiny; rows=8 ;;
        05b) model=random-qwen2.5-0.5b; rows=32 ;;
        15b) model=random-qwen2.5-1.5b; rows=16 ;;
      esac
      timeout -k 10 "$BENCH_S" "$PY" bench/borrowed_weights.py --device "$DEVICE" --model "$model" --rows "$rows" \
        --tokens "$tokens" > "$OUT/$part.log" 2>&1
      rc=$?
      summary+=("$part (rc $rc, $((SECONDS - t0))s): $(grep -E "^(autocast's|the engine's)" "$OUT/$part.log" \
        | sed -E 's/ +/ /g' | tr '\n' ';')")
      ;;
    layouts-*)
      rest=${part#layouts-}; size=${rest%%-*}; rest=${rest#*-}; tokens=${rest%%-*}
      as=(); [ "$rest" != "$tokens" ] && as=(--as-transformers)
      case "$size" in
        tiny) model=tiny ;;
        05b) model=random-qwen2.5-0.5b ;;
        15b) model=random-qwen2.5-1.5b ;;
      esac
      timeout -k 10 "$BENCH_S" "$PY" bench/packing_layouts.py --device "$DEVICE" --model "$model" --prompts 2 \
        --samples 8 --answer-tokens "$tokens" --repeats 2 ${as[@]+"${as[@]}"} > "$OUT/$part.log" 2>&1
      rc=$?
      summary+=("$part (rc $rc, $((SECONDS - t0))s): $(grep -E '^(padded|shared prefix)' "$OUT/$part.log" \
        | sed -E 's/ +/ /g' | tr '\n' ';')")
      ;;
    *)
      size=${part%%-*}; rest=${part#*-}; tokens=${rest%%-*}
      extra=()
      if [ "$rest" != "$tokens" ]; then  # -fsdp: ours alone (TRL's figures come from the plain part), with FSDP2
        extra=(--skip-trl)
        if [ "$DEVICE" = cuda ]; then extra+=(--shard-one-gpu); else echo "$part: FSDP2 on one GPU needs a GPU"; fi
      fi
      case "$size" in
        tiny) model=tiny; arch=qwen2; micro=32; limit=$BENCH_S ;;
        05b) model=random-qwen2.5-0.5b; arch=qwen2.5-0.5b; micro=32; limit=$BENCH_S ;;
        15b) model=random-qwen2.5-1.5b; arch=qwen2.5-1.5b; micro=16; limit=$BENCH_15B_S ;;
      esac
      # the first step warms up and is dropped; micro-batches in both trainers (TRL: gradient accumulation), no
      # gradient checkpointing in either
      steps=4; [ "$tokens" -ge 512 ] && steps=3
      prompts=16; [ "$size" = tiny ] && steps=2 && prompts=4  # tiny: a check of the script, not a figure
      # the random model is built (and saved: ~5.6 GB for 1.5B) before the bench's clock starts
      timeout -k 10 150 "$PY" -c "import sys; from skygym_adapters.models import build_tiny_model as b; \
b(architecture=sys.argv[1], tokenizer_from=sys.argv[2] or None)" "$arch" "${SKYRL_GYM_TINY_MODEL:-}" \
        > "$OUT/model_$part.log" 2>&1 || echo "building $model failed: $OUT/model_$part.log"
      timeout -k 10 "$limit" "$PY" bench/train_step.py --device "$DEVICE" --model "$model" --prompts "$prompts" \
        --samples 8 --new-tokens "$tokens" --steps "$steps" --micro-batch "$micro" --json "$OUT/bench_$part.json" \
        ${extra[@]+"${extra[@]}"} > "$OUT/bench_$part.log" 2>&1
      rc=$?
      # (the weight sync's way in the summary: an engine that stops lending the policy its weights falls back to
      # copying them, with a warning, not an error)
      summary+=("bench $part (rc $rc, $((SECONDS - t0))s): $(grep -E 's/step|speed-up|peak memory, |failed|weight sync' \
        "$OUT/bench_$part.log" | tr '\n' ';')")
      ;;
  esac
  echo "${summary[-1]}"
done
echo "--- summary ($((SECONDS - start))s in all)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
