#!/usr/bin/env bash
# Creates .venv if needed, installs requirements.txt and runs the whole test suite
# (tests/ and the docstring examples of agn_jax/ and experiments/).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k transform`; a
# first argument that is a path runs only what the arguments name, e.g.
# `bash scripts/test.sh tests/unit` (the fast layer) or `tests/e2e`.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
targets=(tests agn_jax experiments)
if [[ $# -gt 0 && -e "${1%%::*}" ]]; then
  targets=()
fi
# The tests, and every docstring example in the library and experiments/, in
# two pytest processes (pytest-xdist), a test file each at a time: much of
# the suite waits on the processes, Ray instances and signals it starts, so
# one process leaves a core idle. `-n 0` runs it in one process.
python -m pytest -q --doctest-modules -n 2 --dist loadfile "${targets[@]}" "$@"
