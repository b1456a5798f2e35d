"""The README's and docs/'s examples run as written, and their commands parse.

Every ```python block of README.md and docs/*.md runs (the distributed runs
through `agn_jax.runtime.train` are covered by the runtime tests). Every
`agn-train`, `agn-sweep`, `agn-report` and `agn-compare` command of their
```bash blocks (or its `python -m experiments.X` form) is parsed by the
program's own flags, so a renamed flag or configuration fails here.
"""

import glob
import os
import re
import shlex

import pytest
from absl import flags

from experiments import console
from experiments import flags as flags_lib
from experiments import sweep
from experiments.report import main as report_main
import helpers

REPO = str(helpers.REPO)
DOCS = ["README.md"] + sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))


def _code(kind):
  """`(document, index, code)` of every ```kind block."""
  out = []
  for doc in DOCS:
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
      text = f.read()
    for i, code in enumerate(re.findall(rf"```{kind}\n(.*?)```", text, re.S)):
      out.append((doc, i, code))
  return out


def _examples():
  return [(doc, i, code) for doc, i, code in _code("python")
          if "runtime import train" not in code]


def test_docs_exist_and_have_examples():
  assert DOCS == ["README.md", "docs/algorithms.md", "docs/backends.md",
                  "docs/language_model.md", "docs/reproducing.md",
                  "docs/workloads.md"]
  assert {doc for doc, _, _ in _examples()} == {
      "README.md", "docs/algorithms.md", "docs/backends.md",
      "docs/language_model.md", "docs/workloads.md"}
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    readme = f.read()
  for doc in DOCS[1:]:
    assert f"]({doc})" in readme, doc


@pytest.mark.parametrize("doc, index, code", _examples(),
                         ids=[f"{d}:{i}" for d, i, _ in _examples()])
def test_example_runs(doc, index, code, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  exec(compile(code, f"{doc} example {index}", "exec"), {})


def _commands():
  """`(document, program, args)` of every agn-jax command in a ```bash block."""
  out = []
  for doc, _, code in _code("bash"):
    for line in code.replace("\\\n", " ").splitlines():
      words = shlex.split(line, comments=True)
      if words[:2] == ["python", "-m"] and words[2:3] and words[2].startswith(
          "experiments."):
        program, args = words[2].split(".", 1)[1], words[3:]
      elif words and words[0] in console.SCRIPTS:
        program, args = words[0][len("agn-"):], words[1:]
      else:
        continue
      out.append((doc, program, args))
  return out


def _flag_values(program):
  values = flags.FlagValues()
  if program == "train":
    flags_lib.define_train_flags(values)
  elif program == "sweep":
    sweep.define_flags(values)
  elif program == "report":
    report_main.define_flags(values)
  return values


def test_every_documented_command_parses(monkeypatch):
  monkeypatch.chdir(REPO)  # Where the flagfile paths in the docs start.
  commands = _commands()
  assert {p for _, p, _ in commands} == {"train", "compare", "sweep", "report"}
  for doc, program, args in commands:
    if program == "compare":  # Run directories and --output: nothing to check.
      assert args and not [a for a in args if a.startswith("--config")], doc
      continue
    values = _flag_values(program)
    try:
      flags_lib.parse_flags_or_exit([program, *args], values)
    except SystemExit as e:
      pytest.fail(f"{doc}: {program} {' '.join(args)}: exit {e.code}")
    if program == "sweep":
      sweep.strategy_overrides(values.strategy_flagfile,
                               sweep.shared_fields(values))
