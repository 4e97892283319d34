#!/usr/bin/env bash
# The README's main job: sets up a virtual environment and scores the GSM8K reference solutions
# (and the same solutions with a wrong final number) through the `gsm8k` env.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SKYRL_GYM_VENV:-$HOME/.cache/skyrl-gym/venvs/quickstart}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q -e "$ROOT[data]"

DATA="$ROOT/../shared/data/gsm8k"
OUT="${SKYRL_GYM_OUT:-$ROOT/outputs/quickstart}"
if [ -f "$DATA/test.jsonl" ]; then
  "$VENV/bin/python" "$ROOT/examples/gsm8k/gsm8k_dataset.py" --train_file "$DATA/train.jsonl" --test_file "$DATA/test.jsonl" --output_dir "$OUT/data"
else
  "$VENV/bin/pip" install -q -e "$ROOT[data,hf]"
  "$VENV/bin/python" "$ROOT/examples/gsm8k/gsm8k_dataset.py" --output_dir "$OUT/data"
fi
echo "== reference solutions (expect mean reward 1.0)"
"$VENV/bin/skyrl-gym" score --rows "$OUT/data/validation.parquet" --output "$OUT/reference_scores.jsonl"
echo "== the same solutions with a wrong final number (expect mean reward 0.0)"
"$VENV/bin/skyrl-gym" score --rows "$OUT/data/validation.parquet" --perturb --output "$OUT/perturbed_scores.jsonl"
