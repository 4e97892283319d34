#!/usr/bin/env bash
# Evaluate an agent YAML through any OpenAI-compatible chat server (`/v1/chat/completions`): vLLM, SGLang, a hosted
# API. No model is loaded here; the server applies its own chat template and the tools go out as OpenAI schemas.
#   BASE_URL    the server's root (with or without /v1); default http://127.0.0.1:8000
#   MODEL       the model name the server knows; default: asked from BASE_URL/v1/models
#   OPENAI_API_KEY  sent as the bearer token when set
#   CONFIG      the agent YAML (a path or a shipped name); default: this folder's multiply_tool_agent.yaml
#   ROWS, OUT   the rows to evaluate (built by make_rows.py when missing) and the trajectories' JSONL
#   LIMIT       evaluate only the first LIMIT rows (default: all)
#   BASE_URL=http://127.0.0.1:8000 MODEL=my-model bash examples/agents/eval_openai.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONFIG="${CONFIG:-$HERE/multiply_tool_agent.yaml}"
ROWS="${ROWS:-/tmp/data/agent_multiply/validation.jsonl}"
OUT="${OUT:-agent_trajectories.jsonl}"
BASE_URL="${BASE_URL:-http://127.0.0.1:8000}"

if [ ! -f "$ROWS" ]; then
  python "$HERE/make_rows.py" --out "$(dirname "$ROWS")" --train 64 --val 16
fi
ARGS=(--data "$ROWS" --output "$OUT" --base-url "$BASE_URL")
if [ -n "${MODEL:-}" ]; then ARGS+=(--model "$MODEL"); fi
if [ -n "${LIMIT:-}" ]; then ARGS+=(--limit "$LIMIT"); fi
skyrl-gym agent eval "$CONFIG" "${ARGS[@]}" "$@"
