#!/usr/bin/env bash
# Creates .venv if needed, installs requirements.txt and runs the main job on the bundled digits data.
# Extra arguments are train flags, e.g. `bash scripts/demo.sh --num_workers=2`.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m experiments.train --flagfile=experiments/configs/quickstart.flags "$@"
