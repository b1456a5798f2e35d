"""Compressed commits (`--commit_compression`): the codecs against numpy, error feedback, every backend's wire and byte counts.

The references are computed here: bf16 by `ml_dtypes`' rounding, int8 by
hand, top-k by `np.argsort`, the error-feedback sums in float64 numpy. The
runs (int8 commits train as well as float32 ones; the bytes a run counts)
are tests/e2e/test_compression_e2e.py.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import multiprocess
import numpy as np
import optax
import pytest

from agn_jax import strategies
from agn_jax import TrainConfig, build, compression, data, get_strategy
from agn_jax.config import SimulatedOptions, field_error
from agn_jax import wire as wire_lib
from agn_jax.wire import CommitMeta, FlatLayout, wire_bytes
from agn_jax.runtime.server import server_apply_fn
from agn_jax.runtime.transports.inprocess import InProcessTransport
from agn_jax.runtime.transports.shared_memory import SharedMemoryTransport
from agn_jax.runtime.worker import worker_functions
from agn_jax.sim.simulation import Simulation

CODECS = ("bf16", "int8", "topk:0.1", "topk:1")


def _vector(size=2500, seed=0):
  """Entries over many magnitudes, with one outlier and one zero."""
  rng = np.random.default_rng(seed)
  x = (rng.standard_normal(size) * 10.0**rng.uniform(-6, 1, size)).astype(
      np.float32)
  x[7], x[11] = 40.0, 0.0
  return x


def _decoded(codec, x):
  return np.asarray(codec.decode(codec.encode(jnp.asarray(x)), len(x)))


# --- The codecs against numpy -------------------------------------------------


def test_bf16_rounds_as_ml_dtypes_does():
  x = _vector()
  codec = compression.parse("bf16")
  expected = x.astype(ml_dtypes.bfloat16).astype(np.float32)
  np.testing.assert_array_equal(_decoded(codec, x), expected)
  # On the wire: the bfloat16 bits as uint16, 2 B per entry, undone exactly.
  encoded = codec.encode(jnp.asarray(x))
  (wire,) = codec.to_wire(encoded)
  assert wire.dtype == np.uint16 and wire.nbytes == 2 * len(x)
  np.testing.assert_array_equal(
      np.asarray(wire), expected.astype(ml_dtypes.bfloat16).view(np.uint16))
  np.testing.assert_array_equal(
      np.asarray(codec.decode(codec.from_wire((np.asarray(wire),)), len(x))),
      expected)


def test_int8_is_a_symmetric_scale_per_chunk():
  x = _vector()
  x[2048:] = 0.0  # The last chunk (of 452) is all zeros.
  codec = compression.parse("int8")
  q, scale = (np.asarray(a) for a in codec.encode(jnp.asarray(x)))
  # By hand: chunks of 1024, s = max|x| / 127, q = round(x / s).
  chunk = compression.INT8_CHUNK
  chunks = math.ceil(len(x) / chunk)
  padded = np.zeros(chunks * chunk, np.float32)
  padded[:len(x)] = x
  blocks = padded.reshape(chunks, chunk)
  s = np.abs(blocks).max(axis=1) / np.float32(127)
  assert s[-1] == 0
  safe = np.where(s > 0, s, 1).astype(np.float32)
  q_ref = np.clip(np.round(blocks / safe[:, None]), -127, 127).astype(np.int8)
  assert q.dtype == np.int8 and scale.dtype == np.float32
  np.testing.assert_array_equal(scale, s)
  np.testing.assert_array_equal(q, q_ref.reshape(-1)[:len(x)])
  decoded = _decoded(codec, x)
  np.testing.assert_allclose(
      decoded, (q_ref * s[:, None]).reshape(-1)[:len(x)], rtol=1e-7)
  # Off by at most half a step of its chunk's scale; the outlier is exact.
  step = np.repeat(s, chunk)[:len(x)]
  assert np.all(np.abs(decoded - x) <= step / 2 * (1 + 1e-6))
  assert decoded[7] == x[7]
  assert np.all(decoded[2048:] == 0)


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.5, 1.0])
def test_topk_keeps_the_largest_magnitudes(fraction):
  x = _vector()
  codec = compression.parse(f"topk:{fraction}")
  indices, values = (np.asarray(a) for a in codec.encode(jnp.asarray(x)))
  k = math.ceil(fraction * len(x))
  top = np.argsort(-np.abs(x), kind="stable")[:k]
  assert indices.dtype == np.int32 and len(indices) == k
  assert set(indices.tolist()) == set(top.tolist())
  np.testing.assert_array_equal(values, x[indices])
  expected = np.zeros_like(x)
  expected[top] = x[top]
  np.testing.assert_array_equal(_decoded(codec, x), expected)


def test_encoded_sizes():
  p = 2500
  sizes = {c: compression.parse(c).encoded_bytes(p) for c in CODECS}
  assert sizes == {"bf16": 2 * p, "int8": p + 4 * 3,
                   "topk:0.1": 8 * 250, "topk:1": 8 * p}


@pytest.mark.parametrize("name", CODECS)
def test_a_non_finite_delta_stays_non_finite(name):
  # The server refuses any commit with a non-finite number (Strategy.accepts).
  codec = compression.parse(name)
  for bad in (np.nan, np.inf):
    x = _vector()
    x[1234] = bad
    encoded = codec.encode(jnp.asarray(x))
    floats = [a for a in encoded if jnp.issubdtype(a.dtype, jnp.floating)]
    assert not all(bool(jnp.all(jnp.isfinite(a))) for a in floats)


# --- Error feedback -----------------------------------------------------------


@pytest.mark.parametrize("name", CODECS)
def test_sent_plus_residual_is_every_delta(name):
  codec = compression.parse(name)
  rng = np.random.default_rng(1)
  deltas = rng.standard_normal((12, 3000)).astype(np.float32) * 1e-2
  residual = jnp.zeros(3000)
  sent = np.zeros(3000)
  for delta in deltas:
    encoded, residual = compression.compress(codec, jnp.asarray(delta),
                                             residual)
    sent += np.asarray(codec.decode(encoded, 3000), np.float64)
  np.testing.assert_allclose(sent + np.asarray(residual, np.float64),
                             deltas.astype(np.float64).sum(axis=0),
                             rtol=0, atol=1e-6)
  if name == "topk:1":
    assert not np.any(np.asarray(residual))


def test_a_strategy_feeds_back_and_its_server_decodes():
  # AEASGD commits E = α (θ_k − θ̃); the center, starting at zero, adds what
  # the server decoded, so it plus the worker's residual is Σ E.
  alpha = 5.0 * 0.01
  s = strategies.with_compression(
      get_strategy("aeasgd", inner=optax.sgd(0.1)),
      compression.parse("topk:0.25"))
  rng = np.random.default_rng(2)
  params = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(4)}
  state = s.init_worker(params)
  center = jax.tree.map(jnp.zeros_like, params)
  server = s.rule.init(center)
  expected = np.zeros(16)
  for _ in range(6):
    x = {"w": rng.standard_normal((3, 4)).astype(np.float32),
         "b": rng.standard_normal(4).astype(np.float32)}
    pulled = {"w": rng.standard_normal((3, 4)).astype(np.float32),
              "b": rng.standard_normal(4).astype(np.float32)}
    # Leaves in jax.tree.leaves order: b, then w.
    expected += alpha * np.concatenate([(x["b"] - pulled["b"]).ravel(),
                                        (x["w"] - pulled["w"]).ravel()])
    payload, state = s.worker_commit(state._replace(params=x), pulled)
    assert len(payload["delta"][0]) == 4  # ⌈16 / 4⌉ entries sent.
    center, server, accepted = s.server_apply(center, server, payload, 0)
    assert bool(accepted)
  got = np.concatenate([np.ravel(center["b"]), np.ravel(center["w"])])
  np.testing.assert_allclose(got + np.asarray(state.residual), expected,
                             rtol=1e-5, atol=1e-6)
  # A rejected commit starts the worker afresh: no residual either.
  fresh = s.worker_receive(state, center, False)
  assert not np.any(np.asarray(fresh.residual))


def test_adag_compresses_its_delta_only():
  s = strategies.with_compression(get_strategy("adag"),
                                  compression.parse("bf16"))
  center = {"w": jnp.full(3, 0.1)}
  payload, _ = s.worker_commit(s.init_worker(center), center)
  wire = wire_lib.pack(s, payload)
  assert [a.dtype for a in wire] == [jnp.uint16, jnp.float32]
  back = wire_lib.unpack(s, wire, center)
  np.testing.assert_array_equal(back["stale_center"]["w"], center["w"])


def test_a_strategy_without_a_delta_is_refused_in_one_line():
  s = dataclasses.replace(get_strategy("agn"), payload=("direction",))
  with pytest.raises(ValueError, match="commits no delta") as e:
    strategies.with_compression(s, compression.parse("int8"))
  assert "\n" not in str(e.value)


# --- none: today's behaviour --------------------------------------------------


def test_none_builds_the_strategy_as_before():
  config = TrainConfig()
  assert config.commit_compression == "none"
  assert build.build_strategy(config).compression is None
  assert build.build_strategy(dataclasses.replace(
      config, commit_compression="int8")).compression.name == "int8"


def test_none_sends_the_float32_vectors_the_layout_ravels():
  # The process worker's and server's wire without compression: one
  # float32 vector per payload entry, `FlatLayout.ravel`, bit for bit.
  s = get_strategy("adag", communication_window=2, inner=optax.sgd(0.5))
  rng = np.random.default_rng(3)
  tree = {"b": jnp.asarray(rng.standard_normal(3), jnp.float32),
          "w": jnp.asarray(rng.standard_normal((3, 2)), jnp.float32)}
  layout = FlatLayout.from_tree(tree)
  payload = {"delta": jax.tree.map(lambda a: a * 0.3, tree),
             "stale_center": tree}
  wire = wire_lib.pack(s, payload)
  for vector, key in zip(wire, s.payload):
    np.testing.assert_array_equal(vector, layout.ravel_numpy(payload[key]))
  back = wire_lib.unpack(s, wire, tree)
  jax.tree.map(np.testing.assert_array_equal, back, payload)
  assert wire_lib.wire_of(s, layout) == ((9, "<f4"), (9, "<f4"))


def test_a_lossless_code_commits_exactly_as_none():
  # topk:1 sends every entry: the residual stays zero, and the centers and
  # the worker's parameters follow none's bit for bit.
  rng = np.random.default_rng(4)
  plain = get_strategy("aeasgd", inner=optax.sgd(0.1))
  lossless = strategies.with_compression(plain, compression.parse("topk:1"))
  runs = []
  for s in (plain, lossless):
    params = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(4)}
    state, center = s.init_worker(params), params
    server = s.rule.init(center)
    trajectory = []
    for _ in range(5):
      x = jax.tree.map(lambda a: rng.standard_normal(a.shape).astype(
          np.float32), params)
      payload, state = s.worker_commit(state._replace(params=x), center)
      center, server, _ = s.server_apply(center, server, payload, 1)
      state = s.worker_receive(state, center, True)
      trajectory.append((center, state.params))
    runs.append(trajectory)
    if s is lossless:
      assert not np.any(np.asarray(state.residual))
    rng = np.random.default_rng(4)
  jax.tree.map(np.testing.assert_array_equal, *runs)


def test_the_time_model_sends_the_compressed_bytes():
  ds = data.load("digits", seed=0)
  models = {}
  for name in ("none", "int8"):
    config = TrainConfig(num_workers=2, dataset="digits", hidden_sizes=(32,),
                         commit_compression=name, backend="simulated",
                         options=SimulatedOptions(cluster="paper",
                                                  latency_ms=0.0))
    models[name] = Simulation.from_config(config, ds).time_model
  none, int8 = models["none"], models["int8"]
  p = none.record["center_bytes"] // 4
  assert none.record["payload_bytes"] == 4 * p
  assert int8.record["payload_bytes"] == p + 4 * math.ceil(p / 1024)
  # latency 0: a message's time is its bytes over the bandwidth.
  assert int8.commit_seconds == pytest.approx(
      none.commit_seconds * int8.record["payload_bytes"] / (4 * p))
  assert int8.pull_seconds == none.pull_seconds


# --- The runtime's wire -------------------------------------------------------


def _wire_payload(wire, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for n, dtype in wire:
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
      info = np.iinfo(dtype)
      out.append(rng.integers(info.min, info.max, n, dtype=dtype))
    else:
      out.append(rng.standard_normal(n).astype(dtype))
  return tuple(out)


@pytest.mark.parametrize("name", ["int8", "topk:0.1", "bf16"])
def test_transports_carry_a_compressed_commit_bit_for_bit(name):
  s = build.build_strategy(TrainConfig(commit_compression=name))
  layout = FlatLayout.from_tree({"w": np.zeros((50, 41), np.float32)})
  wire = wire_lib.wire_of(s, layout)
  p = layout.num_params
  payload = _wire_payload(wire)
  meta = CommitMeta(0, 0, 0.5, {}, 0.0)
  ctx = multiprocess.get_context("spawn")
  shm = SharedMemoryTransport.create(ctx, p, len(wire), num_slots=2,
                                     wire=wire)
  threads = InProcessTransport(p, len(wire), 1, 2, wire=wire)
  plain = SharedMemoryTransport.create(ctx, p, 1, num_slots=2)
  try:
    # The ring's slots are sized for the compressed commit, not p float32s.
    assert shm._ring_seg.size < plain._ring_seg.size  # pylint: disable=protected-access
    for t in (shm, threads):
      t.publish(np.zeros(p, np.float32), 0)
      assert t.commit(payload, meta, timeout=1)
      commit = t.next_commit(timeout=1)
      assert [np.asarray(a).dtype for a in commit.payload] == [
          a.dtype for a in payload]
      for got, sent in zip(commit.payload, payload):
        np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                      sent.view(np.uint8))
      t.release(commit)
  finally:
    for t in (shm, plain):
      t.close()
      t.unlink()
  assert wire_bytes(wire) == s.compression.encoded_bytes(p) < 4 * p


def test_the_process_server_applies_what_the_process_worker_sent():
  # The jitted worker and server pieces of the processes/ray/threads
  # backends, around the flat wire: the center moves by the decoded delta.
  s = build.build_strategy(TrainConfig(strategy="aeasgd",
                                       commit_compression="int8"))
  tree = {"b": np.zeros(7, np.float32), "w": np.zeros((40, 70), np.float32)}
  layout = FlatLayout.from_tree(tree)
  loss_fn = lambda params, batch: (0.0, {})
  fns = worker_functions(s, loss_fn, layout)
  center = jnp.asarray(np.random.default_rng(5).standard_normal(
      layout.num_params).astype(np.float32))
  state = fns.init(center)
  state = state._replace(params=jax.tree.map(lambda a: a + 0.01 * jnp.arange(
      a.size, dtype=jnp.float32).reshape(a.shape) / a.size, state.params))
  wire, state, accepted = fns.commit(state, center)
  assert bool(accepted)
  assert [str(a.dtype) for a in wire] == ["int8", "float32"]
  apply = server_apply_fn(s, layout)
  rule_state = s.rule.init(layout.unravel(center))
  new, _, ok = apply(jnp.array(center), rule_state,
                     tuple(np.asarray(a) for a in wire), np.int32(0))
  assert bool(ok)
  decoded = np.asarray(s.compression.decode(tuple(wire), layout.num_params))
  assert np.abs(decoded).max() > 0
  np.testing.assert_allclose(np.asarray(new), np.asarray(center) + decoded,
                             rtol=1e-6, atol=1e-7)
  # What the int8 code dropped waits in the worker's residual.
  np.testing.assert_allclose(
      decoded + np.asarray(state.residual),
      0.05 * layout.ravel_numpy(jax.tree.map(
          lambda a: 0.01 * np.arange(a.size, dtype=np.float32).reshape(
              a.shape) / a.size, tree)), rtol=1e-5, atol=1e-7)


# --- The setting ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["topk:0", "topk:1.5", "int4", "topk:",
                                   "topk:x", "topk:nan", "TOPK:0.1", ""])
def test_a_bad_value_is_a_one_line_error(value):
  error = field_error("commit_compression", value)
  assert error == (
      "commit_compression accepts none, bf16, int8 or topk:FRACTION with "
      f"FRACTION in (0, 1], got {value!r}")
  with pytest.raises(ValueError) as e:
    TrainConfig(commit_compression=value).validate()
  assert str(e.value) == error


@pytest.mark.parametrize("value", ["none", "bf16", "int8", "topk:0.01",
                                   "topk:1"])
def test_good_values_validate(value):
  assert field_error("commit_compression", value) is None
  assert TrainConfig(commit_compression=value).validate()
