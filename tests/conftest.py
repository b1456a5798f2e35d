"""One JAX persistent compilation cache for the test session and every process it starts.

The suite compiles the same programs over and over: every CLI subprocess,
every simulated run and many tests jit the same model and window kernel
anew. A session-wide cache turns all but the first compilation of each into
a disk read (a simulated CLI run: half its CPU time). It is set in the
environment before anything imports JAX, so every subprocess inherits it;
it lives in a fresh temporary directory (never the checkout or $HOME),
removed at the end, so no run of the suite depends on what an earlier one
left. The suite's programs are tiny and run a few steps each, so XLA's
backend optimisations cost more than they save: the session compiles at
`--xla_backend_optimization_level=0` (a quick-study run: about 1.5x less
CPU) and with XLA:CPU's older elemental emitters instead of its fusion
emitters, `--xla_cpu_use_fusion_emitters=false` (2 to 3x less CPU for a
compile), unless the caller set XLA_FLAGS. The math is the same; every
reference comparison keeps its tolerance. The parts the runtime spawns
(workers, server, evaluator, Ray actors) read the runtime's own cache,
`$AGN_JAX_CACHE_DIR`: the session points it at the same directory, so a
program the test process compiled is not compiled again by a run's
children, and the suite neither reads nor fills the runtime's default JAX
cache, `~/.cache/agn_jax/jax_cache` (a local run starts as cold as CI's).

Tests marked `soak` (end-to-end runs whose behaviour a cheaper test of the
suite covers: each says which) are left out of the suite, so that it stays
under CI's 8 minutes. They run with `-m soak` (or any -m expression that
names `soak`), with AGN_JAX_SOAK=1, or when named one by one as
`FILE::TEST`; `bash scripts/soak.sh` runs them all.

The tests come in two folders: `tests/unit/` (in-process, fast) and
`tests/e2e/` (real processes, Ray, CLI subprocesses, and whole runs in
this process: simulated runs, the loops on threads, the report's quick
study). The `slow` marker follows the folder: every test under `tests/e2e/`
gets it here, so `-m "not slow"` and `tests/unit` run the same tests. The
helpers both import (`helpers`, `strategy_reference`, `fifth_strategy`) stay
in `tests/`, on the path by pyproject's `pythonpath`.
"""

import os
import pathlib
import re
import shutil
import sys
import tempfile

_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_made = []  # The directory this session made, to remove at its end.
_XLA_FLAGS = ("--xla_backend_optimization_level=0 "
              "--xla_cpu_use_fusion_emitters=false")


def pytest_configure(config):
  # pytest-xdist hands out files by their number of tests, most first,
  # unless told not to: `_longest_first`'s order is the one wanted.
  if getattr(config.option, "loadscopereorder", None):
    config.option.loadscopereorder = False
  os.environ.setdefault("XLA_FLAGS", _XLA_FLAGS)
  if os.environ.get(_CACHE_ENV):  # The caller chose a cache: keep it.
    return
  cache_dir = tempfile.mkdtemp(prefix="agn-jax-test-jax-cache-")
  _made.append(cache_dir)
  settings = {
      _CACHE_ENV: cache_dir,
      # The runtime's children: the same directory, unless the caller chose.
      "AGN_JAX_CACHE_DIR": os.environ.get("AGN_JAX_CACHE_DIR", cache_dir),
      # Small programs compile in well under JAX's default 1 s threshold,
      # and they are the ones the suite compiles most.
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
      "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
  }
  os.environ.update(settings)
  if "jax" in sys.modules:  # Imported already (a plugin): set it here too.
    jax = sys.modules["jax"]
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def pytest_unconfigure(config):
  del config
  while _made:
    shutil.rmtree(_made.pop(), ignore_errors=True)


_E2E = pathlib.Path(__file__).resolve().parent / "e2e"


def pytest_itemcollected(item):
  """Marks every test under tests/e2e/ `slow`: the marker follows the folder."""
  if _E2E in item.path.resolve().parents:
    item.add_marker("slow")


_SOAK_ENV = "AGN_JAX_SOAK"


def _runs_soak(config) -> bool:
  """Whether this session asked for the soak tests: AGN_JAX_SOAK, or a -m naming `soak`."""
  if os.environ.get(_SOAK_ENV, "") not in ("", "0"):
    return True
  return "soak" in re.findall(r"\w+", config.getoption("markexpr") or "")


def _named(config):
  """The `FILE::TEST` arguments, as node ids relative to the root directory."""
  named = set()
  for arg in config.args:
    if "::" not in arg:
      continue
    path, rest = arg.split("::", 1)
    try:
      path = pathlib.Path(path).resolve().relative_to(config.rootpath)
    except ValueError:
      continue
    named.add(f"{path.as_posix()}::{rest}")
  return named


# The suite's longest files, longest first (their summed test time in a
# fresh clone, 2026-12-05; each over 5 s): pytest-xdist's `--dist loadfile`
# gives files to its two processes in this order (see `pytest_configure`),
# so a long file handed out last (test_report_e2e.py's quick study) would
# otherwise run alone at the end while the other process idles.
_LONGEST_FIRST = (
    "tests/e2e/test_ray_backend.py", "tests/e2e/test_report_e2e.py",
    "tests/e2e/test_reliability.py", "tests/e2e/test_outcomes.py",
    "tests/e2e/test_cli.py", "tests/e2e/test_runtime_e2e.py",
    "tests/e2e/test_simulator_e2e.py", "tests/e2e/test_diagnostics_e2e.py",
    "tests/e2e/test_exchange_e2e.py", "tests/e2e/test_workloads_e2e.py",
    "tests/e2e/test_simulated_backend.py", "tests/e2e/test_assignment_e2e.py",
    "tests/unit/test_transformer.py", "tests/unit/test_instruments.py",
    "tests/e2e/test_dylu_e2e.py", "tests/e2e/test_compression_e2e.py",
    "tests/unit/test_data.py", "tests/unit/test_readme.py",
    "tests/e2e/test_compare_e2e.py", "tests/unit/test_transform.py",
    "tests/unit/test_kernel.py", "agn_jax/transformer.py",
    "tests/e2e/test_sweep_e2e.py", "tests/unit/test_simulator.py",
    "tests/e2e/test_server_instruments_e2e.py", "tests/e2e/test_config_e2e.py",
    "tests/unit/test_compression.py", "tests/e2e/test_models_e2e.py",
    "tests/unit/test_strategies.py", "tests/e2e/test_fifth_strategy_e2e.py",
)


def _longest_first(items):
  """The items with `_LONGEST_FIRST`'s files first; each file's own order kept."""
  rank = {path: i for i, path in enumerate(_LONGEST_FIRST)}
  items[:] = sorted(items, key=lambda item: rank.get(
      item.nodeid.split("::", 1)[0], len(rank)))


def pytest_collection_modifyitems(config, items):
  _longest_first(items)
  if _runs_soak(config):
    return
  named = _named(config)
  kept, left_out = [], []
  for item in items:
    if (item.get_closest_marker("soak") is None or item.nodeid in named or
        item.nodeid.split("[", 1)[0] in named):
      kept.append(item)
    else:
      left_out.append(item)
  if left_out:
    config.hook.pytest_deselected(items=left_out)
    items[:] = kept
