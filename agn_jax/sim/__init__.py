"""The simulated backend's engine: n asynchronous workers in one deterministic program.

  speeds.py       `--speed_model`: how fast each worker is (pure numpy)
  clock.py        the time model: cluster presets, workload costs, each
                  window's and message's time (pure numpy)
  schedule.py     the commits in the order the FIFO server applies them:
                  the event schedule and a replayed order (pure numpy)
  engine.py       the jitted parts: the workload's XLA cost, the `workers`
                  mesh, `map_in_place` and one round of windows and commits
  simulation.py   `Simulation`: the host side that drives the rounds, and
                  its checkpoint state

Nothing here imports the runtime: `agn_jax.runtime.backends.simulated`
drives a `Simulation` and writes what it returns. The modules are imported
by name (`from agn_jax.sim.simulation import Simulation`): the config reads
the clock's choices without JAX.
"""
