"""Attacks 17. Round four: verified data files, one study per directory, compare at scale.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *


class DataAttacks:
  """verified data files, one study per directory, compare at scale (issue 34)."""

  # 17a-b. MNIST files of the published size are checked against its SHA-256.

  def _published_size_mnist(self, name, compress=False) -> str:
    """A --data_dir of MNIST's four files at their published sizes, one byte in each flipped from zeros."""
    import gzip  # pylint: disable=g-import-not-at-top
    import struct  # pylint: disable=g-import-not-at-top
    data_dir = self.path(name)
    os.makedirs(data_dir)
    for stem, header, count in (
        ("train-images-idx3-ubyte", struct.pack(">4B3I", 0, 0, 8, 3, 60000,
                                                28, 28), 60000 * 784),
        ("train-labels-idx1-ubyte", struct.pack(">4BI", 0, 0, 8, 1, 60000),
         60000),
        ("t10k-images-idx3-ubyte", struct.pack(">4B3I", 0, 0, 8, 3, 10000, 28,
                                               28), 10000 * 784),
        ("t10k-labels-idx1-ubyte", struct.pack(">4BI", 0, 0, 8, 1, 10000),
         10000)):
      payload = bytearray(count)
      payload[count // 2] = 1  # The flipped byte: a valid IDX file still.
      data = header + bytes(payload)
      if compress:
        stem, data = stem + ".gz", gzip.compress(data, compresslevel=1)
      with open(os.path.join(data_dir, stem), "wb") as f:
        f.write(data)
    return data_dir

  def _refuses_corrupt(self, name, compress):
    data_dir = self._published_size_mnist(name, compress)
    workdir = self.path(name + "_run")
    line = expect_one_line_error(
        cli("train", "--dataset=mnist", f"--data_dir={data_dir}",
            "--dataset_size=2000", "--backend=simulated", "--noplots",
            f"--workdir={workdir}"), "train")
    if data_dir not in line or "SHA-256" not in line:
      raise Failed(f"does not name the file and its digest: {line}")
    if os.path.lexists(workdir):
      raise Failed(f"left {workdir} behind")
    return line[:160]

  def attack_17a(self):
    """a corrupt MNIST file of the published size is refused, named"""
    return self._refuses_corrupt("mnist_flipped", compress=False)

  def attack_17b(self):
    """the same, gzipped: the content is what is checked"""
    return self._refuses_corrupt("mnist_flipped_gz", compress=True)

  # 17c-d. A compilation cache that cannot be a directory.

  def attack_17c(self):
    """AGN_JAX_CACHE_DIR pointing at a file: exit 2 naming it"""
    cache = self.path("cache_file")
    with open(cache, "w") as f:
      f.write("x")
    workdir = self.path("cache_file_run")
    line = expect_exit_2_naming(
        cli("train", *SMALL, f"--workdir={workdir}",
            env={"AGN_JAX_CACHE_DIR": cache}), "train", "AGN_JAX_CACHE_DIR",
        "is a file")
    if os.path.lexists(workdir):
      raise Failed(f"left {workdir} behind")
    return line

  def attack_17d(self):
    """--cache_dir under a regular file: exit 2 naming --cache_dir"""
    regular = self.path("cache_regular")
    with open(regular, "w") as f:
      f.write("x")
    return expect_exit_2_naming(
        cli("train", *SMALL, f"--cache_dir={regular}/jax",
            f"--workdir={self.path('cache_dir_run')}"), "train", "--cache_dir")

  # 17e-g. One study per directory.

  def attack_17e(self):
    """two reports on one study directory: the second exits 2 naming the first, which loses nothing"""
    study = self.path("study")
    first = start("report", "--preset=quick", f"--study_dir={study}",
                  f"--output_dir={self.path('study_out')}")
    try:
      wait_until(first, lambda: os.path.exists(
          os.path.join(study, "study.json")), 60)
      second = cli("report", "--preset=quick", f"--study_dir={study}",
                   f"--output_dir={self.path('study_out2')}", deadline=60)
      line = expect_exit_2_naming(second, "report", "--study_dir",
                                  f"pid {first.pid}")
    finally:
      first.send_signal(signal.SIGINT)
      finish(first, 60)
    aside = [d for d in glob.glob(os.path.join(study, "**", "*.failed-*"),
                                  recursive=True)]
    if aside:
      raise Failed(f"runs of the first report moved aside: {aside[:3]}")
    return line

  def attack_17f(self):
    """report --study_dir on a read-only filesystem (/sys): one line, exit 2"""
    return expect_exit_2_naming(
        cli("report", "--preset=quick", "--study_dir=/sys/agn_attack_study"),
        "report", "--study_dir")

  def attack_17g(self):
    """report --report_only on a directory that holds no study: one line, exit 2"""
    return expect_exit_2_naming(
        cli("report", "--preset=quick", "--report_only",
            f"--study_dir={self.path('no_study')}"), "report", "no study")

  # 17h. agn-compare at scale.

  def attack_17h(self):
    """agn-compare on 2,000 runs finishes within 90 s and prints its table"""
    base = self.base()
    runs = self.path("many_runs")
    os.makedirs(runs)
    dirs = []
    for i in range(2000):
      target = os.path.join(runs, f"r{i:04d}")
      os.makedirs(target)
      for name in ("config.json", "summary.json", "metrics.jsonl"):
        os.link(os.path.join(base, name), os.path.join(target, name))
      dirs.append(target)
    started = time.monotonic()
    result = cli("compare", *dirs, f"--output={self.path('many.png')}",
                 deadline=90)
    took = time.monotonic() - started
    expect_success(result, "compare")
    if result.stdout.count("\nr0000  ") < 1 or "E test" not in result.stdout:
      raise Failed(f"no table: {lines_of(result.stdout)[:3]}")
    return f"{took:.1f} s"
