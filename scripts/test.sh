#!/usr/bin/env bash
# The README's test command: installs what the suite needs and runs every test session.
#   bash scripts/test.sh                 # everything: core, then vllm and trl beside verl, py310 (and gpu)
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
nox=("$VENVS/nox/bin/nox" -f scripts/noxfile.py --envdir "$VENVS")
if [ $# -gt 0 ]; then
  exec "${nox[@]}" "$@"
fi

# The whole suite: core (three pytest workers keep both cores busy while tests wait), then the vllm and trl sessions
# beside the verl, gpu and py310 ones. vllm, verl and trl run one test at a time and keep about one core busy each
# (seen on the 2-core machine: vllm 2-3.5 minutes, trl under one, verl 2-3; py310, the hub on Python 3.10, 3.5):
# side by side the two lanes take about the time of the longer (trl went beside vllm: the other lane was the
# longer by more than trl's time). The vllm lane's output follows the others'. Every session runs whatever
# another's result; the exit status is 1 if any failed. py310 skips, saying why, where there is no Python 3.10.
status=0
vllm_log="$(mktemp "${TMPDIR:-/tmp}/skyrl-gym-vllm-session.XXXXXX")"
install_log="$(mktemp "${TMPDIR:-/tmp}/skyrl-gym-installs.XXXXXX")"
# Ray's sockets and session files in a folder of the session's own: the verl session starts a Ray of its own too
ray_tmp="$(mktemp -d "${TMPDIR:-/tmp}/ray-vllm.XXXX")"
trap 'rm -rf "$vllm_log" "$install_log" "$ray_tmp"' EXIT
# The other sessions' environments install while the core session runs (on a new machine their pip runs took 4-5 of
# the 8.5 minutes after it), at the lowest CPU priority so that the core tests go first; where they are kept, nox
# finds them set up in seconds. The sessions themselves wait for it: two pips must not write one environment.
setsid -w nice -n 19 "${nox[@]}" -s vllm verl trl py310 --install-only > "$install_log" 2>&1 &
install_pid=$!
trap 'kill -TERM -- "-$install_pid" 2>/dev/null; echo "== stopped; the installs beside it too"; exit 130' INT TERM
"${nox[@]}" -s core || status=1
if ! wait "$install_pid"; then  # each session installs again itself, and fails there if pip still does
  echo "== installing the vllm, verl, trl and py310 environments beside the core session failed:"
  cat "$install_log"
fi
# In a process group of its own (setsid): a script's background job ignores Ctrl-C, so Ctrl-C stops it from here.
RAY_TMPDIR="$ray_tmp" setsid -w "${nox[@]}" -s vllm trl > "$vllm_log" 2>&1 &
vllm_pid=$!
trap 'kill -TERM -- "-$vllm_pid" 2>/dev/null; echo "== stopped; the vllm and trl sessions too"; exit 130' INT TERM
"${nox[@]}" -s verl gpu py310 || status=1
vllm_status=0
wait "$vllm_pid" || vllm_status=1
echo "== the vllm and trl sessions (they ran beside verl, gpu and py310):"
cat "$vllm_log"
[ "$vllm_status" -eq 0 ] || status=1
echo "== sessions: core, vllm, verl, trl, gpu, py310: $([ "$status" -eq 0 ] && echo "all passed (or skipped)" || echo "at least one FAILED (above)")"
exit "$status"
