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
  # or fails. Both compile the bytecode once here: where
  # PYTHONDONTWRITEBYTECODE is set, every process of a run (and of the
  # tests) would otherwise compile JAX's sources anew on import.
  if ! { python -m pip install -q --disable-pip-version-check uv \
           >/dev/null 2>&1 &&
         python -m uv pip install -q --compile-bytecode -r requirements.txt \
           -r requirements-ray.txt; }; then
    python -m pip install -q --disable-pip-version-check -r requirements.txt \
      -r requirements-ray.txt
  fi
  echo "$want" > "$stamp"
fi
# The checkout's own bytecode too, each time (seconds; only changed files
# compile): where PYTHONDONTWRITEBYTECODE is set, Python never writes it, and
# each process of a run or of the tests (workers, server, evaluator, Ray
# actors, CLI subprocesses) compiled agn_jax/ and experiments/ anew: 0.2 s
# of CPU a process, hundreds of processes in the suite. A stale file is
# still seen: Python checks each source's time against its bytecode's.
python -m compileall -q -j 0 agn_jax experiments scripts tests >/dev/null || true
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Keep JAX quiet and cache compiled kernels across processes and runs.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
