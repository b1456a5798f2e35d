"""The end-to-end half of tests/unit/test_synchronous.py: the CLI, E on the runs, and the round sharded over devices."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from experiments import compare
import helpers


def _summary(workdir):
  return json.loads((workdir / "summary.json").read_text())


def test_both_run_from_the_cli_and_compare(tmp_path):
  # n = 2 on digits, batch 16: each worker's share is 22 steps; the
  # constant speeds of --cluster=none make a round last its λ steps.
  common = ("--backend=simulated", "--dataset=digits", "--num_workers=2",
            "--hidden_sizes=16", "--epochs=0.5", "--eval_every_rounds=4",
            "--nocheckpoints", "--noplots")
  runs = {"sync_data_parallel": 1, "diloco": 5}
  for name, window in runs.items():
    result = helpers.run_cli(*common, f"--strategy={name}",
                             f"--communication_window={window}",
                             f"--workdir={tmp_path / name}")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = _summary(tmp_path / name)
    rounds = 22 // window
    assert summary["completed"], summary
    assert summary["simulation"]["rounds"] == rounds
    # A commit is one worker's message: n a round, none stale.
    assert summary["num_commits"] == summary["expected_commits"] == 2 * rounds
    assert summary["worker_commits"] == [rounds, rounds]
    assert (summary["mean_staleness"], summary["max_staleness"]) == (0.0, 0)
    assert summary["simulated_seconds"] == rounds * window
    commits = helpers.metrics_rows(tmp_path / name, {"commit"})
    assert [r["clock"] for r in commits[:4]] == [2, 2, 4, 4]
    assert [r["sim_time"] for r in commits[:4]] == [window, window,
                                                     2 * window, 2 * window]
  assert _summary(tmp_path / "diloco")["config"]["server_optimizer"] == (
      "nesterov")
  e = compare.efficiency(compare.read_run(tmp_path / "diloco"),
                         compare.read_run(tmp_path / "sync_data_parallel"))
  # On one clock: the modeled time of the cluster model (here steps).
  assert (e["time_base"], e["same_time_base"]) == ("simulated", True), e
  assert np.isfinite(e["test"]) and e["test"] > 0, e
  assert np.isfinite(e["train"]) and e["train"] > 0, e


def test_the_processes_backend_refuses_in_one_line(monkeypatch, capsys):
  result = helpers.train_here(monkeypatch, capsys, "--strategy=diloco",
                              "--backend=processes")
  line = helpers.assert_one_line_error(result)
  assert result.returncode == 2
  assert "runs on the simulated backend only" in line, line


_SHARDED = textwrap.dedent("""
    import json
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from agn_jax.config import SimulatedOptions, TrainConfig
    from agn_jax.data import load_synthetic
    from agn_jax.sim.simulation import Simulation

    ds = load_synthetic(size=300, seed=0)
    out = {}
    # diloco's round is sync_data_parallel's: one sharded exchange.
    for name, window in (("diloco", 2),):
      config = TrainConfig(strategy=name, num_workers=3,
                           communication_window=window, hidden_sizes=(8,),
                           batch_size=4, epochs=0.1, seed=0,
                           backend="simulated", options=SimulatedOptions(
                               speed_model="lognormal:0.5"))
      runs = []
      for mesh in (None, Mesh(np.array(jax.devices()[:1]), ("workers",))):
        sim = Simulation.from_config(config, ds, mesh=mesh)
        records = [[r.meta.worker, r.clock, r.staleness, r.meta.loss,
                    r.simulated_time] for rs in sim for r in rs]
        runs.append({"devices": sim.info["num_devices"], "records": records,
                     "center": sim.center().tolist()})
      out[name] = runs
    print(json.dumps(out))
""")


def test_sharded_equals_unsharded():
  xla_flags = os.environ.get("XLA_FLAGS", "")  # The session's, kept.
  env = dict(os.environ, PYTHONPATH=str(helpers.REPO), XLA_FLAGS=(
      f"{xla_flags} --xla_force_host_platform_device_count=3").strip())
  result = subprocess.run([sys.executable, "-c", _SHARDED], env=env,
                          capture_output=True, text=True, timeout=300,
                          cwd=helpers.REPO)
  assert result.returncode == 0, result.stderr[-3000:]
  out = json.loads(result.stdout.strip().splitlines()[-1])
  for name, (sharded, single) in out.items():
    assert (sharded["devices"], single["devices"]) == (3, 1), name
    assert sharded["records"] and len(sharded["records"]) == len(
        single["records"])
    for a, b in zip(sharded["records"], single["records"]):
      assert a[:3] == b[:3] and a[4] == b[4], name
      np.testing.assert_allclose(a[3], b[3], rtol=1e-5)
    np.testing.assert_allclose(sharded["center"], single["center"],
                               rtol=1e-5, atol=1e-6)
