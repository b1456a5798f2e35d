#!/usr/bin/env bash
# Creates .venv if needed, installs requirements.txt and runs the whole test suite
# (tests/ and the docstring examples of agn_jax/ and experiments/).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k transform`.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# The tests, and every docstring example in the library and experiments/.
python -m pytest -q --doctest-modules tests agn_jax experiments "$@"
