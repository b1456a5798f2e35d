"""The README's Python examples run as written (the distributed one is covered by the runtime tests)."""

import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "README.md")


def _blocks():
  with open(README, encoding="utf-8") as f:
    text = f.read()
  # The distributed example is exercised by tests/test_runtime.py.
  return [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
          if "runtime import train" not in b]


def test_readme_has_examples():
  assert len(_blocks()) >= 4


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_readme_example_runs(index, tmp_path, monkeypatch):
  code = _blocks()[index]
  monkeypatch.chdir(tmp_path)
  exec(compile(code, f"README.md example {index}", "exec"), {})
