"""A study's results as files to commit: what the report reads of each completed run.

A run directory holds checkpoints, TensorBoard events and a lock beside its
results, and lives on the machine that ran it. The archive,
`<output_dir>/study/` by default, keeps only what the report reads of each
completed run (`config.json`, `summary.json` and `metrics.jsonl`, gzipped)
under the run's own path, and the study's books (`study.json`: preset,
command, compute ledger). Committed with the report, it lets a study resume
on a fresh clone, and the report regenerate from the repository alone:
`sync` copies each archived run the study directory lacks into it, and each
completed run the archive lacks into the archive (a run that is not its
cell's, `identity.mismatch`, stays out).

Example:
  >>> import os, tempfile
  >>> from experiments.report import design
  >>> run = design.preset("quick").runs[0]
  >>> study_dir, archive_dir = tempfile.mkdtemp(), tempfile.mkdtemp()
  >>> path = run.path(study_dir)
  >>> os.makedirs(os.path.join(path, "checkpoints"))
  >>> for name, text in [("config.json", "{}"), ("metrics.jsonl", '{"clock": 0}\\n'),
  ...                    ("summary.json", '{"outcome": "completed"}')]:
  ...   with open(os.path.join(path, name), "w") as f:
  ...     _ = f.write(text)
  >>> save(path, run.path(archive_dir))
  True
  >>> sorted(os.listdir(run.path(archive_dir)))
  ['config.json', 'metrics.jsonl.gz', 'summary.json']
  >>> fresh = tempfile.mkdtemp()
  >>> restore(run.path(archive_dir), run.path(fresh))
  True
  >>> open(os.path.join(run.path(fresh), "metrics.jsonl")).read()
  '{"clock": 0}\\n'
"""

import gzip
import json
import os
import shutil
from typing import Dict, Tuple

from agn_jax import workdir as workdir_lib
from experiments import rundirs
from experiments.report import design
from experiments.report import identity

ARCHIVE = "study"
# The study's books keep their name in the archive (`runner.STUDY_FILE`).
BOOKS = "study.json"
ROWS = "metrics.jsonl"
# summary.json goes last: an archived run is whole once its summary is there.
FILES = ("config.json", ROWS, "summary.json")


def default_dir(output_dir: str) -> str:
  """Where a report in `output_dir` keeps its study's archive."""
  return os.path.join(output_dir, ARCHIVE)


def _stored(name: str) -> str:
  return name + ".gz" if name == ROWS else name


def archived(archive_path: str) -> bool:
  """Whether `archive_path` holds a whole completed run."""
  return (all(os.path.isfile(os.path.join(archive_path, _stored(n)))
              for n in FILES) and rundirs.completed(archive_path))


def _replace(path: str, write) -> None:
  """Writes `path` through a temporary file, so no reader sees half of it."""
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    write(f)
  os.replace(tmp, path)


def save(run_path: str, archive_path: str) -> bool:
  """Archives the completed run in `run_path`; whether it wrote anything.

  The rows are gzipped with no name or time in the header, so the same
  run archives to the same bytes.
  """
  if archived(archive_path) or not rundirs.completed(run_path):
    return False
  if not all(os.path.isfile(os.path.join(run_path, n)) for n in FILES):
    return False
  os.makedirs(archive_path, exist_ok=True)
  for name in FILES:
    with open(os.path.join(run_path, name), "rb") as src:
      if name == ROWS:
        _replace(os.path.join(archive_path, _stored(name)), lambda f: _gzip(
            src, f))
      else:
        _replace(os.path.join(archive_path, name),
                 lambda f: shutil.copyfileobj(src, f))  # pylint: disable=cell-var-from-loop
  return True


def _gzip(src, dst) -> None:
  with gzip.GzipFile(filename="", mode="wb", fileobj=dst, mtime=0) as z:
    shutil.copyfileobj(src, z)


def restore(archive_path: str, run_path: str) -> bool:
  """Unpacks an archived run into `run_path` if that holds nothing yet; whether it did."""
  if not archived(archive_path):
    return False
  if os.path.isdir(run_path) and workdir_lib.entries(run_path):
    return False
  os.makedirs(run_path, exist_ok=True)
  for name in FILES:
    if name == ROWS:
      with gzip.open(os.path.join(archive_path, _stored(name)), "rb") as src:
        _replace(os.path.join(run_path, name),
                 lambda f: shutil.copyfileobj(src, f))  # pylint: disable=cell-var-from-loop
    else:
      shutil.copyfile(os.path.join(archive_path, name),
                      os.path.join(run_path, name))
  return True


def _books(path: str) -> Dict[str, object]:
  try:
    with open(path) as f:
      data = json.load(f)
    return data if isinstance(data, dict) else {}
  except (OSError, ValueError):
    return {}


def sync(p: design.Preset, study) -> Tuple[int, int]:
  """Restores archived runs into the study, then archives its completed runs.

  Ledger entries the study's books lack come from the archive's books (the
  sittings of other machines); then the archive's books become the study's.

  Args:
    p: the study's preset.
    study: its books (`runner.Study`), with an `archive_dir`.

  Returns:
    (runs restored into the study, runs newly archived).

  Raises:
    ValueError: the archive holds another preset's study.
  """
  archive_dir = study.archive_dir
  books = _books(os.path.join(archive_dir, BOOKS))
  if books.get("preset") not in (None, p.name):
    raise ValueError(f"{archive_dir} archives a --preset={books['preset']} "
                     f"study, not {p.name}")
  restored = sum(restore(r.path(archive_dir), r.path(study.dir))
                 for r in p.runs)
  ledger = books.get("ledger")
  if isinstance(ledger, dict):
    for key, entry in ledger.items():
      study.ledger.setdefault(key, entry)
  for key in ("preset", "command"):
    if study.data.get(key) is None and books.get(key) is not None:
      study.data[key] = books[key]
  # A run that is not its cell's (`identity.mismatch`) is never archived.
  saved = sum(save(r.path(study.dir), r.path(archive_dir)) for r in p.runs
              if identity.mismatch(r, r.path(study.dir)) is None)
  if study.preset is not None and (restored or saved or books != study.data):
    study.save()  # Into the study directory and the archive.
  return restored, saved
