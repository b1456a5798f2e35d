"""The house's shape, checked from the source: no import cycle, no module over 700 lines, the runtime grouped by seam, one commit type."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agn_jax"


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(ROOT).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
  return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _top_level_imports(path: pathlib.Path, modules) -> set:
  """The agn_jax modules `path` imports when it is imported (module level, not inside a function)."""
  tree = ast.parse(path.read_text())
  this = _module_name(path)
  package = this if path.name == "__init__.py" else this.rpartition(".")[0]
  found = set()
  for node in tree.body:
    names = []
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package.split(".")[:len(package.split(".")) -
                                           node.level + 1] + [base]).strip(".")
      names = [base] + [f"{base}.{a.name}" for a in node.names]
    for name in names:
      # The deepest agn_jax module the name is, or lies in.
      while name and name not in modules:
        name = name.rpartition(".")[0]
      if name.startswith("agn_jax") and name != this:
        found.add(name)
  return found


def _cycle(graph):
  """One import cycle of `graph` as a list of modules, or None."""
  state = {}

  def visit(node, stack):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(graph[node]):
      if state.get(nxt) == "open":
        return stack[stack.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt, stack)
        if found:
          return found
    stack.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node, [])
      if found:
        return found
  return None


def test_no_import_cycle_among_the_modules():
  modules = _modules()
  graph = {name: {m for m in _top_level_imports(path, modules)
                  # A package's own __init__ importing its children is no
                  # cycle of the design; a child importing its parent is.
                  if not m.startswith(name + ".")}
           for name, path in modules.items()}
  assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_one():
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_over_700_lines():
  long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
          if (n := len(p.read_text().splitlines())) > 700}
  assert not long


def test_the_runtime_keeps_at_most_8_modules_at_its_top():
  top = sorted(p.name for p in (PACKAGE / "runtime").glob("*.py")
               if p.name != "__init__.py")
  assert len(top) <= 8, top
  assert {p.name for p in (PACKAGE / "runtime" / "backends").glob("*.py")} >= {
      "processes.py", "ray.py", "simulated.py"}


def test_a_commit_has_one_metadata_type():
  definitions = [
      f"{p.relative_to(ROOT)}: {m.group(0)}"
      for p in PACKAGE.rglob("*.py")
      for m in re.finditer(r"^class (Commit\w*|\w*Commit)\b.*$",
                           p.read_text(), re.M)]
  metadata = [d for d in definitions if "NamedTuple" in d and re.search(
      r"class (CommitMeta|CommitHeader|CommitRecord)\b", d)]
  assert len(metadata) == 1 and "agn_jax/wire.py" in metadata[0], metadata
