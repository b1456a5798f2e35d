#!/usr/bin/env bash
# Creates .venv if needed, installs requirements.txt and runs the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k transform`.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m pytest -q tests "$@"
