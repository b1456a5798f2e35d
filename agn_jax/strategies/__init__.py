"""Every algorithm of the paper as a `Strategy`: worker transformation, server rule, commit/pull half-steps.

Pure and jittable; nothing here knows about processes. Every backend looks a
strategy up by name (in the registry, or a `"package.module:function"`
written outside this package: `check_name`) and only calls its half-steps
(`Strategy.worker_commit`, `server_apply`, `worker_receive`), in the order
`exchange` sequences them.

* `base`: the server rules, the workers' commit and pull functions,
  `Strategy`, `exchange` and `with_compression`.
* `registry`: the strategies by name (`get_strategy`, `register`,
  `paper_defaults`) and their factories.
* `optimizers`: the local and server optimizers the config names
  (`make_worker_optimizer`, `make_server_optimizer`, `delayed_nesterov`)
  and the workers' learning-rate schedule (`learning_rate_schedule`).
* `synchronous`: the strategies that run in synchronous rounds
  (sync_data_parallel, diloco) and their round's exchange
  (`synchronous_exchange`).

Example:
  >>> from agn_jax import strategies
  >>> s = strategies.get_strategy("agn", communication_window=10)
  >>> s.pull_before_commit, s.commit_reads_center, s.payload
  (False, False, ('delta',))
"""

from agn_jax.strategies.base import (Exchange, Payload, ResidualWorkerState,
                                     ServerRule, ServerState, Strategy,
                                     WorkerState, adag_increment,
                                     add_increment, delta_and_center_commit,
                                     delta_commit, dynsgd_increment,
                                     elastic_commit, exchange, keep_pull,
                                     nesterov_anchor, reanchor_pull,
                                     server_rule, with_compression)
from agn_jax.strategies.optimizers import (LR_SCHEDULES,
                                           SERVER_OPTIMIZER_SETTINGS,
                                           SERVER_OPTIMIZERS,
                                           WORKER_OPTIMIZERS,
                                           DelayedNesterovState,
                                           at_schedule_step, check_positive,
                                           delayed_nesterov,
                                           learning_rate_schedule,
                                           make_server_optimizer,
                                           make_worker_optimizer,
                                           schedule_step,
                                           server_optimizers_using)
from agn_jax.strategies.registry import (_PAPER_DEFAULTS, _REGISTRY,
                                         adag_strategy, aeasgd_strategy,
                                         agn_strategy, available, check_name,
                                         downpour_strategy, dynsgd_strategy,
                                         eamsgd_strategy, get_strategy,
                                         paper_defaults, parameters,
                                         register)
from agn_jax.strategies.synchronous import (LastGradient, SynchronousRound,
                                            diloco_strategy, hold_gradient,
                                            is_synchronous,
                                            sync_data_parallel_strategy,
                                            synchronous_exchange)

__all__ = [
    "DelayedNesterovState", "Exchange", "LR_SCHEDULES", "LastGradient",
    "Payload",
    "ResidualWorkerState", "SERVER_OPTIMIZERS", "SERVER_OPTIMIZER_SETTINGS",
    "ServerRule", "ServerState", "Strategy", "SynchronousRound",
    "WORKER_OPTIMIZERS", "WorkerState", "adag_increment", "adag_strategy",
    "add_increment", "aeasgd_strategy", "agn_strategy", "at_schedule_step",
    "available",
    "check_name", "check_positive", "delayed_nesterov",
    "delta_and_center_commit", "delta_commit", "diloco_strategy",
    "downpour_strategy", "dynsgd_increment", "dynsgd_strategy",
    "eamsgd_strategy", "elastic_commit", "exchange", "get_strategy",
    "hold_gradient", "is_synchronous", "keep_pull", "learning_rate_schedule",
    "make_server_optimizer",
    "make_worker_optimizer", "nesterov_anchor", "paper_defaults",
    "parameters", "reanchor_pull", "register", "schedule_step",
    "server_optimizers_using",
    "server_rule", "sync_data_parallel_strategy", "synchronous_exchange",
    "with_compression",
]
