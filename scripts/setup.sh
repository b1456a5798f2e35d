#!/usr/bin/env bash
# Shared set-up for demo.sh and test.sh: creates .venv if missing and installs
# requirements.txt and requirements-ray.txt (the optional ray backend, so its
# tests run too). Source it; it leaves the venv activated and the working
# directory at the repository root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
# One stamp over both files: a change to either reinstalls.
stamp=".venv/.requirements.sha256"
want="$(cat requirements.txt requirements-ray.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing requirements.txt and requirements-ray.txt" >&2
  # uv installs the same pins in seconds where pip takes a minute or two
  # (it fetches and unpacks in parallel); pip does it where uv cannot be had
  # or fails. Neither compiles bytecode here: that was 36 of the 52 s of a
  # fresh set-up, for the whole 1 GB; each module compiles instead when first
  # imported (see PYTHONPYCACHEPREFIX below), a few percent of it.
  if ! { python -m pip install -q --disable-pip-version-check uv \
           >/dev/null 2>&1 &&
         python -m uv pip install -q -r requirements.txt \
           -r requirements-ray.txt; }; then
    python -m pip install -q --disable-pip-version-check --no-compile \
      -r requirements.txt -r requirements-ray.txt
  fi
  echo "$want" > "$stamp"
fi
# Bytecode is written once, on first import, and read by every later process
# (workers, server, evaluator, Ray actors, CLI subprocesses of the tests):
# without it each would compile JAX's sources and ours anew, 0.2 s and more
# of CPU a process, hundreds of processes in the suite. Where the caller set
# PYTHONDONTWRITEBYTECODE (to keep .pyc files out of source trees), it goes
# under .venv/pycache instead, out of the checkout and site-packages alike.
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX="$ROOT/.venv/pycache"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Keep JAX quiet and cache compiled kernels across processes and runs.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
