"""The end-to-end half of tests/unit/test_cluster.py: scripts/fit_cluster.py's committed fit and its command line."""

import json
import os
import subprocess
import sys

import pytest

from agn_jax.sim import clock
from agn_jax.sim import speeds
from helpers import REPO

RESULTS = os.path.join(str(REPO), "experiments", "results")


def test_the_paper_presets_are_the_committed_fit():
  # `--cluster=paper_refit --speed_model=thesis_refit` is what scripts/fit_cluster.py
  # found (experiments/results/cluster_fit.json), and that fit meets the
  # targets it states; the first fit stays beside it, named.
  with open(os.path.join(RESULTS, "cluster_fit.json")) as f:
    fit = json.load(f)
  assert fit["speed_model"] == speeds.THESIS_REFIT_SPEED_MODEL
  work = clock.Workload(num_params=4_798_010, flops_per_step=3.484e9,
                        optimizer_floats=4.0)
  model = clock.time_model(clock.PAPER_REFIT, work, num_workers=20,
                           communication_window=15)
  assert [model.step_seconds, model.commit_seconds,
          model.server_apply_seconds] == pytest.approx(
              [fit["cluster"][k] for k in ("step_seconds", "message_seconds",
                                           "apply_seconds")], abs=6e-4)
  assert fit["cluster"]["apply_seconds"] <= fit["apply_bound_seconds"]
  assert fit["meets"] == {"median_abs_loo_residual": True,
                          "tv_distance": fit["tv_distance"] <= 0.10,
                          "below_10": True}
  with open(os.path.join(RESULTS, "cluster_fit_v1.json")) as f:
    v1 = json.load(f)
  assert v1["speed_model"] == speeds.THESIS_SPEED_MODEL


@pytest.mark.parametrize("flag,named", [
    ("--sigma_step=1e-7", "--sigma_step"), ("--seeds=0", "--seeds"),
    ("--output=/proc/x.json", "--output=/proc/x.json")])
def test_fit_cluster_refuses_bad_flags_in_one_line(tmp_path, flag, named):
  out = subprocess.run(
      [sys.executable, os.path.join(str(REPO), "scripts", "fit_cluster.py"),
       flag] + ([] if flag.startswith("--output") else
                [f"--output={tmp_path / 'fit.json'}"]),
      capture_output=True, text=True, timeout=60)
  assert out.returncode == 2
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("fit_cluster.py: error: ")
  assert named in lines[0]
  assert not list(tmp_path.iterdir())
