"""The end-to-end half of tests/unit/test_simulator.py: real processes, subprocesses or whole runs."""

import json
import os
import re
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import TrainConfig, build
from agn_jax.config import SimulatedOptions
from agn_jax.data import load_synthetic
from agn_jax.shares import BatchSampler
from agn_jax.sim.simulation import Simulation
import helpers
from test_simulator import _run


REPO = str(helpers.REPO)


def _tiny_config(**overrides):
  settings = dict(strategy="agn", num_workers=3, communication_window=2,
                  dataset="synthetic", hidden_sizes=(8,), batch_size=4,
                  epochs=0.2, seed=0, learning_rate=1e-2)
  settings.update(overrides)
  return TrainConfig(**settings)


class OneWorkerTest(absltest.TestCase):

  def test_equals_lookahead(self):
    lam, batch, lr = 3, 4, 1e-2
    config = _tiny_config(num_workers=1, communication_window=lam,
                          batch_size=batch, epochs=0.3, learning_rate=lr)
    ds = load_synthetic(size=200, seed=0)
    sim = Simulation.from_config(config, ds)
    self.assertEqual(sim.num_windows, 4)

    # The reference: optax.lookahead on the same model, init and batches.
    model, loss_fn = build.build_model(config, ds.num_classes, ds.input_shape)
    init = build.initial_center(config, model, 32)
    tx = optax.lookahead(optax.adam(lr), sync_period=lam,
                         slow_step_size=1 / lam)
    params = optax.LookaheadParams.init_synced(
        jax.tree.map(jnp.asarray, init))
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, batch):
      grads = jax.grad(lambda p: loss_fn(p, batch)[0])(params.fast)
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    sampler = BatchSampler(len(ds.x_train), np.random.default_rng([0, 0]))
    for _ in range(sim.num_windows):
      for idx in sampler.take(lam * batch).reshape(lam, batch):
        params, opt_state = step(params, opt_state,
                                 (ds.x_train[idx], ds.y_train[idx]))
      (record,) = sim.run_round()
      self.assertEqual(record.staleness, 0)
      for a, b in zip(jax.tree.leaves(sim.center_tree()),
                      jax.tree.leaves(params.slow)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    self.assertTrue(sim.done)


class CompiledRoundTest(parameterized.TestCase):
  """The compiled round copies no stacked worker state (a performance guard)."""

  # One strategy per commit and pull code path: the window's delta and a
  # re-anchoring pull (downpour and dynsgd take agn's), adag's kept pulled
  # center, the elastic commit with eamsgd's momentum.
  @parameterized.parameters("agn", "adag", "eamsgd")
  def test_no_copy_of_the_stacked_workers(self, strategy):
    # Writing an unchanged stacked leaf back in the commit loop makes XLA
    # copy that leaf of all n workers on every commit.
    n = 3  # No other dimension of this model is 3.
    sim = Simulation.from_config(
        _tiny_config(strategy=strategy, num_workers=n, hidden_sizes=(8,)),
        load_synthetic(size=200, seed=0, dim=5))
    hlo = sim.lower_round().compile().as_text()
    stacked = re.findall(rf"= f32\[{n},[0-9,]*\]\S* copy\(", hlo)
    self.assertEqual(stacked, [])
    # The pattern's shapes are the stacked leaves' as the HLO writes them.
    self.assertRegex(hlo, rf"f32\[{n},5,8\]")


class DeterminismTest(absltest.TestCase):

  def test_same_run_twice_and_restore(self):
    ds = load_synthetic(size=600, seed=0)
    config = _tiny_config(strategy="adag", num_workers=3,
                          backend="simulated",
                          options=SimulatedOptions(speed_model="random:0.5"))
    full = Simulation.from_config(config, ds)
    full_records = _run(full)
    self.assertGreater(len(full_records), 9)
    for r in full_records:  # λ = 2 steps of batch 4 each.
      steps = r.meta.step_metrics["accuracy"]
      self.assertLen(steps, 2)
      self.assertTrue(all(4 * a == int(4 * a) for a in steps))
      self.assertAlmostEqual(np.mean(steps), r.meta.metrics["accuracy"],
                             places=6)
    orders = {tuple(r.meta.worker for r in full_records[i:i + 3])
              for i in range(0, len(full_records), 3)}
    self.assertGreater(len(orders), 1)  # Really random.

    first = Simulation.from_config(config, ds)
    records = first.run_round() + first.run_round()
    saved = first.state()
    saved["meta"] = json.loads(json.dumps(saved["meta"]))
    saved["arrays"] = jax.tree.leaves(saved["arrays"])  # As a checkpoint.
    second = Simulation.from_config(config, ds)
    second.restore(saved)
    records += _run(second)
    self.assertEqual(records, full_records)  # Bit for bit.
    np.testing.assert_array_equal(second.center(), full.center())
    self.assertEqual(second.state()["meta"], full.state()["meta"])
    loss, metrics = second.evaluate(ds.x_test, ds.y_test)
    self.assertTrue(np.isfinite(loss) and 0 <= metrics["accuracy"] <= 1)

    with self.assertRaisesRegex(ValueError, "speed_model random:0.5"):
      Simulation.from_config(_tiny_config(strategy="adag"), ds).restore(saved)


_SHARDED = textwrap.dedent("""
    import json
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from agn_jax.config import SimulatedOptions, TrainConfig
    from agn_jax.data import load_synthetic
    from agn_jax.sim.engine import default_mesh
    from agn_jax.sim.simulation import Simulation

    ds = load_synthetic(size=600, seed=0)
    out = {"devices": jax.local_device_count()}
    for name, n, speeds, k in (("adag", 8, "random:0.5", 2),
                               ("aeasgd", 4, "lognormal:0.5", None)):
      config = TrainConfig(strategy=name, num_workers=n,
                           communication_window=2, hidden_sizes=(8,),
                           batch_size=4, epochs=0.3, seed=0,
                           backend="simulated", options=SimulatedOptions(
                               speed_model=speeds, workers_per_call=k))
      runs = []
      for mesh in (None, Mesh(np.array(jax.devices()[:1]), ("workers",))):
        sim = Simulation.from_config(config, ds, mesh=mesh)
        records = [list(r) for rs in sim for r in rs]
        loss, metrics = sim.evaluate(ds.x_test, ds.y_test)
        runs.append({"info": sim.info, "records": records,
                     "center": sim.center().tolist(),
                     "evaluation": [loss, metrics["accuracy"]]})
      out[name] = runs
    out["mesh_sizes"] = {n: default_mesh(n).size for n in (4, 6, 10, 7)}
    print(json.dumps(out))
""")


class ShardedTest(absltest.TestCase):

  def test_sharded_equals_unsharded(self):
    xla_flags = os.environ.get("XLA_FLAGS", "")  # The session's, kept.
    env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS=(
        f"{xla_flags} --xla_force_host_platform_device_count=4").strip())
    result = subprocess.run([sys.executable, "-c", _SHARDED], env=env,
                            capture_output=True, text=True, timeout=300,
                            cwd=REPO)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    out = json.loads(result.stdout.strip().splitlines()[-1])
    self.assertEqual(out["devices"], 4)
    for name in ("adag", "aeasgd"):
      sharded, single = out[name]
      self.assertEqual(sharded["info"]["num_devices"], 4, name)
      self.assertEqual(single["info"]["num_devices"], 1, name)
      self.assertNotEmpty(sharded["records"])
      for a, b in zip(sharded["records"], single["records"]):
        self.assertEqual(a[:4], b[:4])  # worker, window, clock, staleness
        np.testing.assert_allclose(a[4:6], b[4:6], rtol=1e-5)
        self.assertEqual(a[6:], b[6:])
      self.assertLen(sharded["records"], len(single["records"]))
      np.testing.assert_allclose(sharded["center"], single["center"],
                                 rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(sharded["evaluation"], single["evaluation"],
                                 rtol=1e-5)
    # The most devices that divide n: nobody is padded.
    self.assertEqual(out["mesh_sizes"], {"4": 4, "6": 3, "10": 2, "7": 1})
