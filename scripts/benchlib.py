"""Shared parts of the benchmarks: the window kernel against a plain optax loop, the simulator against the per-worker floor.

* `KernelRunner`, `PlainRunner`, `kernel_and_plain` and `interleaved`:
  the AGN window kernel (λ local steps in one dispatch) and a plain
  per-step jitted optax loop on the same pre-stacked device batches, timed
  in interleaved repetitions (scripts/bench_kernel.py, bench_lm.py).
* `run_simulator` and `run_window_kernel`: the simulated backend's
  samples/s over a config's rounds, and one model's window kernel at the
  same batch size fed host-sampled batches, the per-worker floor
  (scripts/bench_simulator.py, bench_lm.py).
* `jax_machine`: the machine and JAX's versions and devices.
"""

import gc
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_transport import machine  # pylint: disable=g-import-not-at-top


def fresh(tree):
  """A copy with buffers of its own (donation must not see shared buffers)."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree.map(lambda x: jax.numpy.array(x, copy=True), tree)


class KernelRunner:
  """Runs `windows` windows through a window kernel per timed call."""

  def __init__(self, loss_fn, tx, params, batches, donate=True):
    from agn_jax.kernel import window_kernel  # pylint: disable=g-import-not-at-top
    self.kernel = window_kernel(loss_fn, tx, donate=donate)
    self.params = fresh(params)
    self.state = fresh(tx.init(self.params))
    self.batches = batches

  def __call__(self, windows):
    import jax  # pylint: disable=g-import-not-at-top
    for _ in range(windows):
      r = self.kernel(self.params, self.state, self.batches)
      self.params, self.state = r.params, r.opt_state
    jax.block_until_ready((self.params, self.state, r.metrics))


class PlainRunner:
  """A per-step jitted optax loop, λ dispatches per window."""

  def __init__(self, loss_fn, tx, params, batches):
    import jax  # pylint: disable=g-import-not-at-top
    import optax  # pylint: disable=g-import-not-at-top
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(params, opt_state, batch):
      (loss, aux), grads = grad_fn(params, batch)
      updates, opt_state = tx.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
      return params, opt_state, {"loss": loss, **aux}

    self.step = jax.jit(step, donate_argnums=(0, 1))
    self.params = fresh(params)
    self.state = fresh(tx.init(self.params))
    lam = jax.tree.leaves(batches)[0].shape[0]
    # Pre-split the [λ, B, ...] stack into λ device arrays, outside the
    # timing.
    self.steps = [jax.tree.map(lambda a, i=i: a[i], batches)
                  for i in range(lam)]
    jax.block_until_ready(self.steps)

  def __call__(self, windows):
    import jax  # pylint: disable=g-import-not-at-top
    m = None
    for _ in range(windows):
      for batch in self.steps:
        self.params, self.state, m = self.step(self.params, self.state, batch)
    jax.block_until_ready((self.params, self.state, m))


def kernel_and_plain(loss_fn, params, batches, window, lr):
  """`{"agn": ..., "plain": ...}`: `agn(optax.adam(lr), window)` in the window kernel, and `optax.adam(lr)` one step a dispatch."""
  import optax  # pylint: disable=g-import-not-at-top
  from agn_jax import transform  # pylint: disable=g-import-not-at-top
  return {
      "agn": KernelRunner(loss_fn, transform.agn(optax.adam(lr), window),
                          params, batches),
      "plain": PlainRunner(loss_fn, optax.adam(lr), params, batches),
  }


def interleaved(runners, windows_per_rep, reps, warmup, samples_per_window):
  """Interleaved timing; returns {name: median samples/s}, {name: fastest samples/s} and the raw times."""
  for run in runners.values():  # Compile and warm up.
    run(warmup)
  times = {name: [] for name in runners}
  for _ in range(reps):
    for name, run in runners.items():
      t0 = time.perf_counter()
      run(windows_per_rep)
      times[name].append(time.perf_counter() - t0)
  samples = windows_per_rep * samples_per_window
  rates = {name: samples / statistics.median(t) for name, t in times.items()}
  best = {name: samples / min(t) for name, t in times.items()}
  return rates, best, times


def _rss_mb():
  try:
    import psutil  # pylint: disable=g-import-not-at-top
    return psutil.Process().memory_info().rss / 2**20
  except ImportError:
    return None


def epochs_for(windows, num_workers, window, batch_size, train_size):
  """The epochs of just over `windows` windows a worker (as bench_runtime computes them)."""
  return (windows * window * batch_size + 0.5) * num_workers / train_size


def run_simulator(config, dataset):
  """Steady-state and end-to-end samples/s of the simulated run of `config` (a `TrainConfig`) on `dataset`.

  Every round of `agn_jax.sim.simulation.Simulation` is run; the steady
  state leaves out the first (it compiles).
  """
  from agn_jax.sim.simulation import Simulation  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  sim = Simulation.from_config(config, dataset)
  built = time.perf_counter()
  sim.run_round()
  first = time.perf_counter()
  first_windows = sim.windows_run
  measured = 0
  while not sim.done:
    sim.run_round()
    measured += 1
  end = time.perf_counter()
  samples_window = config.communication_window * config.batch_size
  steady_windows = sim.windows_run - first_windows
  result = {
      "workers_per_call": sim.workers_per_call,
      "info": sim.info,
      "rounds": 1 + measured,
      "windows": sim.windows_run,
      "windows_per_round": round(sim.windows_run / (1 + measured), 2),
      "samples_per_second": (round(steady_windows * samples_window /
                                   (end - first), 1)
                             if measured else None),
      "measured_seconds": round(end - first, 2),
      "end_to_end_samples_per_second": round(
          sim.windows_run * samples_window / (end - t0), 1),
      "end_to_end_seconds": round(end - t0, 2),
      "build_seconds": round(built - t0, 2),
      "first_round_seconds": round(first - built, 2),
      "clock": sim.clock,
      "rss_mb": _rss_mb(),
  }
  del sim
  gc.collect()
  return result


def model_of(config, dataset):
  """`(strategy, loss_fn, params)` of `config` on `dataset`, as a worker builds them (`agn_jax.build`)."""
  import jax  # pylint: disable=g-import-not-at-top
  from agn_jax import build, data  # pylint: disable=g-import-not-at-top
  strategy = build.build_strategy(config)
  model, loss_fn = build.build_model(config, dataset.num_classes,
                                     dataset.input_shape)
  params = jax.tree.map(jax.numpy.asarray, build.initial_center(
      config, model, data.example_of(dataset.x_train)))
  return strategy, loss_fn, params


def run_window_kernel(config, dataset, seconds):
  """One model's window kernel of `config` (its worker transformation, λ, batch size), fed host-sampled batches for `seconds`: the per-worker floor."""
  import jax  # pylint: disable=g-import-not-at-top
  from agn_jax import kernel  # pylint: disable=g-import-not-at-top
  from agn_jax.shares import BatchSampler  # pylint: disable=g-import-not-at-top
  strategy, loss_fn, params = model_of(config, dataset)
  opt_state = strategy.worker_transform.init(params)
  fn = kernel.window_kernel(loss_fn, strategy.worker_transform)
  sampler = BatchSampler(len(dataset.x_train), np.random.default_rng(0))
  lam, batch = config.communication_window, config.batch_size

  def batches():
    idx = sampler.take(lam * batch)
    return tuple(a[idx].reshape((lam, batch) + a.shape[1:])
                 for a in (dataset.x_train, dataset.y_train))

  result = fn(params, opt_state, batches())  # Compiles.
  jax.block_until_ready(result.params)
  params, opt_state = result.params, result.opt_state
  windows, t = 0, time.perf_counter()
  while windows == 0 or time.perf_counter() - t < seconds:
    result = fn(params, opt_state, batches())
    params, opt_state = result.params, result.opt_state
    jax.block_until_ready(params)
    windows += 1
  elapsed = time.perf_counter() - t
  return {"samples_per_second": round(windows * lam * batch / elapsed, 1),
          "windows": windows, "measured_seconds": round(elapsed, 2)}


def floor_around(config, dataset, seconds, measure):
  """`measure()` between two runs of the window kernel of `seconds / 2` each: `(measure's result, the floor)`.

  The floor is the two runs' mean samples/s, so slow drift of the
  machine's load cancels.
  """
  runs = [run_window_kernel(config, dataset, seconds / 2)]
  result = measure()
  runs.append(run_window_kernel(config, dataset, seconds / 2))
  return result, {
      "samples_per_second": round(float(np.mean(
          [r["samples_per_second"] for r in runs])), 1),
      "runs": runs,
  }


def ratio(a, b):
  """`a / b` to three places, or None when either is missing."""
  return round(a / b, 3) if a and b else None


def jax_machine():
  """`machine()` with JAX's and optax's versions, backend and devices."""
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  dev = jax.devices()[0]
  return dict(
      machine(),
      jax_version=jax.__version__,
      optax_version=optax.__version__,
      jax_backend=jax.default_backend(),
      device_kind=dev.device_kind,
      device_count=jax.device_count())
