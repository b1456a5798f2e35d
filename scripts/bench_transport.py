"""Benchmark: one commit + pull round trip of the paper MLP's parameters between two processes.

Compares, in the same run with interleaved repetitions, the shared-memory
transport, a pickled `multiprocess.Queue` round trip, and one in-process numpy
memcpy of the same bytes; with --backend=ray also the Ray transport (a server
actor on a private local Ray instance, this process the worker). Prints one
JSON object. With --commit_compression the shared-memory (and Ray) commit
carries that codec's arrays (`agn_jax.compression`, encoded once before the
timing: this measures the transport, not the codec); the pull is the float32
center either way, and the pickle and memcpy references stay float32.

  python scripts/bench_transport.py [--reps 30] [--num_params 4798010]
      [--backend processes|ray] [--commit_compression none|bf16|int8|topk:F]
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

# Runnable as `python scripts/bench_transport.py` from the repository root.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PAPER_PARAMS = 4_798_010


def machine():
  """A description of the machine the numbers come from."""
  from agn_jax.runtime.backends import calibration  # pylint: disable=g-import-not-at-top
  cpu = calibration.cpu_name()
  try:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  except (ValueError, OSError):
    mem_gib = None
  return {
      "cpu": cpu, "cores": len(os.sched_getaffinity(0)),
      "memory_gib": round(mem_gib, 1) if mem_gib else None,
      "load_average": os.getloadavg(), "python": sys.version.split()[0],
      "numpy": np.__version__, "platform": platform.platform(),
  }


def _read_commit(transport, arrays, buffers):
  """What the server does with a commit, less the arithmetic: reads each of its arrays out; returns the center to publish.

  Uncompressed, the one float32 vector read is the center; a compressed
  commit is read into buffers of its own, and the center published as it is.
  """
  for buffer, array in zip(buffers, arrays):
    np.copyto(buffer, array)
  uncompressed = transport.wire == ((transport.num_params,
                                     np.dtype(np.float32).str),)
  return buffers[0] if uncompressed else None


def _buffers(transport):
  return [np.empty(n, np.dtype(d)) for n, d in transport.wire]


def _server(transport, requests, replies, reps):
  """The other process: for each rep, serve one shm commit, then one pickled one."""
  center = np.zeros(transport.num_params, np.float32)
  buffers = _buffers(transport)
  transport.publish(center, 0)
  for rep in range(reps):
    commit = transport.next_commit(timeout=60)
    read = _read_commit(transport, commit.payload, buffers)
    if read is not None:
      np.copyto(center, read)
    transport.free_slot(commit.handle)
    transport.publish(center, rep + 1)
    transport.acknowledge(commit.meta.worker)
    delta = requests.get()
    center[:] = delta
    replies.put(center)


class RayServer:
  """The server side of the Ray round trip, as a Ray actor: the same steps as `_server`'s."""

  def serve(self, transport, reps):
    center = np.zeros(transport.num_params, np.float32)
    buffers = _buffers(transport)
    transport.publish(center, 0)
    for rep in range(reps):
      commit = transport.next_commit(timeout=60)
      read = _read_commit(transport, commit.payload, buffers)
      if read is not None:
        np.copyto(center, read)
      transport.publish(center, rep + 1)
      transport.release(commit)
    return reps


def _ray_round_trip(transport, payload, pulled, rep):
  """One commit + acknowledgement + pull through the Ray transport, as a worker does it."""
  from agn_jax.wire import CommitMeta
  t = time.perf_counter()
  assert transport.commit(payload, CommitMeta(0, rep, 0.0, {}, 0.0),
                          timeout=60)
  assert transport.wait_acknowledged(0, rep + 1, timeout=60)
  transport.pull(pulled)
  return time.perf_counter() - t


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--reps", type=int, default=30)
  parser.add_argument("--num_params", type=int, default=PAPER_PARAMS)
  parser.add_argument("--backend", choices=("processes", "ray"),
                      default="processes",
                      help="ray: also measure the Ray transport")
  parser.add_argument("--commit_compression", default="none",
                      help="none, bf16, int8 or topk:FRACTION: what the "
                      "commit carries")
  args = parser.parse_args()
  from agn_jax import compression
  try:
    codec = compression.parse(args.commit_compression)
  except ValueError as e:
    parser.error(str(e))
  p = args.num_params
  delta = np.random.default_rng(0).normal(size=p).astype(np.float32)
  payload = (delta,)
  if codec is not None:
    payload = tuple(np.asarray(a) for a in codec.to_wire(codec.encode(delta)))
  wire = tuple((a.size, a.dtype.str) for a in payload)
  ray_server = None
  if args.backend == "ray":
    import ray
    ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    from agn_jax.runtime.transports.ray import RayTransport
    ray_transport = RayTransport.create(p, len(wire), 1, 2, wire=wire)
    ray_server = ray.remote(RayServer).options(num_cpus=0).remote()
    ray_done = ray_server.serve.remote(ray_transport, args.reps + 1)

  import multiprocess
  from agn_jax.wire import CommitMeta  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.transports.shared_memory import SharedMemoryTransport  # pylint: disable=g-import-not-at-top
  ctx = multiprocess.get_context("spawn")
  transport = SharedMemoryTransport.create(ctx, p, payload_size=len(wire),
                                           num_slots=2, num_workers=1,
                                           wire=wire)
  requests, replies = ctx.Queue(), ctx.Queue()
  server = ctx.Process(target=_server,
                       args=(transport, requests, replies, args.reps + 1))
  server.start()
  try:
    pulled = np.empty(p, np.float32)
    times = {"shm": [], "pickle": [], "memcpy": [], "ray": []}
    transport.pull(pulled, timeout=60)
    if ray_server is not None:
      ray_transport.pull(pulled, timeout=60)
    for rep in range(args.reps + 1):  # Rep 0 warms up every path.
      t = time.perf_counter()
      slot = transport.acquire_slot(0, timeout=60)
      views = transport.slot(slot)
      for view, array in zip(views, payload):
        np.copyto(view, array)
      slot_bytes = sum(view.nbytes for view in views)
      transport.queue_slot(slot, CommitMeta(0, rep, 0.0, {}, 0.0))
      transport.wait_acknowledged(0, rep + 1, timeout=60)
      transport.pull(pulled)
      shm_s = time.perf_counter() - t
      assert codec is not None or np.array_equal(pulled, delta)

      t = time.perf_counter()
      requests.put(delta)
      got = replies.get()
      pickle_s = time.perf_counter() - t
      assert got.shape == delta.shape

      t = time.perf_counter()
      np.copyto(pulled, delta)
      memcpy_s = time.perf_counter() - t
      if ray_server is not None:
        ray_s = _ray_round_trip(ray_transport, payload, pulled, rep)
        assert codec is not None or np.array_equal(pulled, delta)
        if rep:
          times["ray"].append(ray_s)
      if rep:
        times["shm"].append(shm_s)
        times["pickle"].append(pickle_s)
        times["memcpy"].append(memcpy_s)
    server.join(60)
    if ray_server is not None:
      ray.get(ray_done, timeout=60)
  finally:
    if ray_server is not None:
      ray.shutdown()
    if server.is_alive():
      server.terminate()
      server.join()
    transport.close()
    transport.unlink()
    for q in (requests, replies):
      q.cancel_join_thread()

  ms = {k: 1000 * float(np.median(v)) for k, v in times.items() if v}
  extra = {}
  if codec is not None:
    # What a commit writes into its shared-memory slot, against the float32
    # delta it would write uncompressed.
    extra = {"commit_bytes_over_uncompressed": round(slot_bytes / (4 * p), 4),
             "compression_targets": {"commit_bytes_over_uncompressed":
                                     "<= 0.3 for int8"}}
  if "ray" in ms:
    extra.update({"ray_roundtrip_ms": round(ms["ray"], 3),
                  "ray_over_shm": round(ms["ray"] / ms["shm"], 2),
                  "ray_targets": {"ray_over_shm": "<= 6"}})
  print(json.dumps({
      "benchmark": "transport_roundtrip",
      "num_params": p,
      "megabytes": round(p * 4 / 1e6, 2),
      "commit_compression": args.commit_compression,
      "commit_bytes": int(slot_bytes),
      "uncompressed_commit_bytes": 4 * p,
      "reps": args.reps,
      "statistic": "median",
      "shm_roundtrip_ms": round(ms["shm"], 3),
      "pickle_queue_roundtrip_ms": round(ms["pickle"], 3),
      "memcpy_ms": round(ms["memcpy"], 3),
      "pickle_over_shm": round(ms["pickle"] / ms["shm"], 2),
      "shm_over_memcpy": round(ms["shm"] / ms["memcpy"], 2),
      "targets": {"pickle_over_shm": ">= 6", "shm_over_memcpy": "<= 5"},
      **extra,
      "machine": machine(),
  }, indent=2))


if __name__ == "__main__":
  main()
