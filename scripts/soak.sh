#!/usr/bin/env bash
# Creates .venv if needed, installs requirements.txt and runs the soak tests:
# the end-to-end runs (`@pytest.mark.soak`) left out of scripts/test.sh
# because a cheaper test of the suite covers their behaviour (each says
# which). Extra arguments go to pytest, e.g. `bash scripts/soak.sh -k ray`.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m pytest -q -n 2 --dist loadfile -m soak tests "$@"
