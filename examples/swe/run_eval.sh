#!/usr/bin/env bash
# SWE tasks end to end on this machine: build instances offline, check them, then evaluate agents.
#   bash examples/swe/run_eval.sh                       # the embedded SmolLM2-135M through the HF engine
#   BASE_URL=http://127.0.0.1:8000 MODEL=my-model bash examples/swe/run_eval.sh   # any OpenAI-compatible server
# Needs a Docker engine (dockerd running; SKYGYM_DOCKER_HOST if it is not docker's default socket).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-outputs/swe}"
LIMIT="${LIMIT:-5}"

skyrl-gym swe build --out "$OUT" --limit "$LIMIT"             # images and instances, cached after the first run
skyrl-gym swe validate "$OUT/instances.jsonl"                 # gold resolved N/N, empty resolved 0/N
python "$HERE/replay_gold.py" "$OUT/instances.jsonl"     # a scripted agent through the tools: reward 1.0
python "$HERE/make_rows.py" "$OUT/instances.jsonl" "$OUT/rows.jsonl" --max-turns 8

if [ -n "${BASE_URL:-}" ]; then
  # A chat model behind an OpenAI-compatible endpoint plays the tools, as native tool calls (the agent layer sends
  # their schemas); MODEL is the name the server serves. The output is also a predictions file for `swe score`.
  skyrl-gym agent eval swe_bench --data "$OUT/rows.jsonl" --base-url "$BASE_URL" --model "${MODEL:?set MODEL}" \
    --output "$OUT/eval_endpoint.jsonl"
else
  # The embedded 135M model: the pipeline runs; expect reward 0 from a model this small.
  skyrl-gym eval --data "$OUT/rows.jsonl" --engine hf --model smollm2-135m --max-tokens 128 --max-turns 8 --max-input-length 4096 \
    --env-config '{"output_cap": 2000}' --output "$OUT/eval_smollm2.jsonl"
fi
