#!/usr/bin/env bash
# The README's test command: installs what the suite needs and runs every test session.
#   bash scripts/test.sh                 # everything (core, vllm, verl, trl)
#   bash scripts/test.sh -s core         # one session; nox arguments pass through
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# System tools for the sandbox and Docker tests (skipped with a reason where they cannot be installed).
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  missing=()
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing system packages: ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || echo "warning: could not install ${missing[*]}; the tests that need them will be skipped"
  fi
fi

PY="${PYTHON:-python3}"
# nox drives one virtual environment per session; they live outside the checkout so that a second
# run reuses them (pip runs again only when what a session installs changed: scripts/noxfile.py).
VENVS="${SKYRL_GYM_VENVS:-$HOME/.cache/skyrl-gym/venvs}"
mkdir -p "$VENVS"
if [ ! -x "$VENVS/nox/bin/nox" ]; then
  "$PY" -m venv "$VENVS/nox"
fi
"$VENVS/nox/bin/pip" install -q "nox>=2024.3"
exec "$VENVS/nox/bin/nox" -f scripts/noxfile.py --envdir "$VENVS" "$@"
