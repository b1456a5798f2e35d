"""Each backend's own settings: the options class `TrainConfig.options` holds.

`ServerOptions` is what a backend with a server part and a commit ring has;
`ProcessesOptions`, `SimulatedOptions` and `RayOptions` are registered under
their backend's name (`agn_jax.settings.register_options`), which is where
`TrainConfig` looks them up.
"""

import dataclasses
import importlib
import os
from typing import Optional

from agn_jax.settings import (NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE,
                              POSITIVE_INT, BackendOptions, directory_error,
                              missing_extra, register_options, setting)
from agn_jax.settings import _names, _settings_of  # pylint: disable=unused-import


@dataclasses.dataclass(frozen=True)
class ServerOptions(BackendOptions):
  """What a backend with a server part and a commit ring has (`agn_jax.runtime.backend.ServerBackend`).

  Each field's help is its flag's (`help_text(name)`).
  """
  num_slots: Optional[int] = setting(
      None, "how many commits may wait for the server; default: min(n, 8).",
      check=POSITIVE_INT.or_unset())
  cache_dir: Optional[str] = setting(
      None, "JAX's persistent compilation cache of every part (on each "
      "node); default $AGN_JAX_CACHE_DIR or ~/.cache/agn_jax/jax_cache; "
      "empty: none.")

  def fit_error(self) -> Optional[str]:
    """Why the compilation cache cannot be used (`directory_error`), or None."""
    env = os.environ.get("AGN_JAX_CACHE_DIR")
    if self.cache_dir is not None:
      return directory_error(self.cache_dir, f"--cache_dir={self.cache_dir}")
    if env:
      return directory_error(env, f"AGN_JAX_CACHE_DIR={env}")
    return None


@register_options("processes")
@dataclasses.dataclass(frozen=True)
class ProcessesOptions(ServerOptions):
  """The processes backend's settings: those of `ServerOptions`.

  Example:
    >>> from agn_jax.config import TrainConfig
    >>> TrainConfig(options=ProcessesOptions(num_slots=2)).to_dict()["num_slots"]
    2
  """


@register_options("simulated")
@dataclasses.dataclass(frozen=True)
class SimulatedOptions(BackendOptions):
  """The simulated backend's settings: its clock (`agn_jax.sim.clock`) and its engine.

  Each field's help is its flag's (`help_text(name)`).

  Example:
    >>> SimulatedOptions(cluster="paper", latency_ms=1.0).fit_error() is None
    True
    >>> SimulatedOptions(latency_ms=1.0).fit_error()
    '--latency_ms needs --cluster=this_host or paper (--cluster=none counts local steps, not seconds)'
  """
  cluster: str = setting(
      "none", "the cluster its clock models: none (time counts local steps; "
      "messages and the server are free), this_host (the step, transport "
      "and apply times measured on this machine, cached), paper (the "
      "thesis' 15 nodes, fitted with --speed_model=thesis_refit to its 98 "
      "published times, its staleness histogram and its workers' traces by "
      "scripts/fit_cluster.py) or paper (the first fit, to four times).",
      choices=_names("agn_jax.sim.clock", "CLUSTERS"))
  speed_model: str = setting(
      "constant", "how fast each worker is: constant (round robin, "
      "staleness n-1), lognormal:SIGMA (each worker's speed exp(σz), drawn "
      "once), random:SIGMA (each window's duration times exp(σz), drawn "
      "anew: fast windows lap slow ones), straggler:P:SLOWDOWN (a window is "
      "SLOWDOWN times longer with probability P), exponential (each "
      "window's duration times an Exp(1) draw, drawn anew: Mitliagkas et "
      "al.'s model), speeds:S0,S1,... (each "
      "worker's speed), "
      "mixed:SIGMA_WORKER:SIGMA_WINDOW[:P:SLOWDOWN[:Q:SPEEDUP]] (each "
      "worker's speed drawn once as lognormal's, the slowest ⌈P n⌉ "
      "SLOWDOWN times slower still, the fastest ⌈Q n⌉ SPEEDUP times "
      "faster, each window drawn around it as random's), trace:RUN_DIR (the window times of a processes run; "
      "needs --cluster=this_host or paper) or thesis (the thesis' cluster, "
      "a mixed model fitted with --cluster=paper_refit by "
      "scripts/fit_cluster.py; thesis: the first fit, random:0.26).",
      parse=lambda text: importlib.import_module(
          "agn_jax.sim.speeds").parse_speed_model(text),
      accepts=lambda: ", ".join(importlib.import_module(
          "agn_jax.sim.speeds").SPEED_MODEL_FORMS))
  bandwidth_gbps: Optional[float] = setting(
      None, "a message's bandwidth in Gb/s (every commit and pull); "
      "default: the --cluster's.", check=POSITIVE.or_unset(), seconds=True)
  latency_ms: Optional[float] = setting(
      None, "a message's fixed cost in ms; default: the --cluster's.",
      check=NON_NEGATIVE.or_unset(), seconds=True)
  server_apply_ms: Optional[float] = setting(
      None, "the server's time per commit in ms (one FIFO queue); default: "
      "the --cluster's.", check=NON_NEGATIVE.or_unset(), seconds=True)
  workers_per_call: Optional[int] = setting(
      None, "workers vmapped together in one call of the window kernel; "
      "default: the platform's measured choice (1 on CPU, all on GPU/TPU).",
      check=POSITIVE_INT.or_unset())
  eval_every_rounds: int = setting(
      10, "rounds between evaluations of the center; 0: only the initial "
      "center's (where every curve starts) and the final one.",
      check=NON_NEGATIVE_INT)
  eval_every_commits: int = setting(
      0, "commits between evaluations of the center, besides "
      "--eval_every_rounds: a round then ends at every such commit (where "
      "rounds end changes no number of the run); 0: none.",
      check=NON_NEGATIVE_INT)

  def fit_error(self) -> Optional[str]:
    """Why the clock's settings do not fit together, or None (`agn_jax.sim.clock.clock_error`)."""
    cluster = importlib.import_module("agn_jax.sim.clock")
    return cluster.clock_error(
        "steps" if self.cluster == "none" else "seconds", self.speed_model,
        **{f.name: getattr(self, f.name) for f in _settings_of(type(self))
           if f.metadata.get("seconds")})


@register_options("ray")
@dataclasses.dataclass(frozen=True)
class RayOptions(ServerOptions):
  """The ray backend's settings: where its cluster is, and those of `ServerOptions`.

  Example:
    >>> from agn_jax.config import TrainConfig
    >>> TrainConfig(backend="ray", options=RayOptions(ray_address="auto")).options
    RayOptions(num_slots=None, cache_dir=None, ray_address='auto')
  """
  ray_address: str = setting(
      "local", "local (start a private Ray instance on this machine), auto "
      "(the cluster this machine is part of) or a cluster address "
      "host:port.")

  def fit_error(self) -> Optional[str]:
    """Why the ray backend cannot run here: Ray not installed (`missing_extra`), or the cache's error."""
    return (missing_extra("--backend=ray", "ray", "agn-jax[ray]") or
            super().fit_error())
