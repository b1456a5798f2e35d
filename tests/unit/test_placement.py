"""Tests of the pure (platform, worker, devices) -> environment mapping; no GPU or TPU needed."""

import pytest

from agn_jax import placement


def test_cpu_more_workers_than_cores_pins_one_core_one_thread_round_robin():
  cores = (0, 1)
  got = [placement.worker_placement("cpu", i, 5, cores=cores) for i in range(5)]
  assert [p.cpu_affinity for p in got] == [(0,), (1,), (0,), (1,), (0,)]
  for p in got:
    assert p.env["JAX_PLATFORMS"] == "cpu"
    assert p.env["OMP_NUM_THREADS"] == "1"
    assert p.env["MKL_NUM_THREADS"] == "1"
    assert p.env["OPENBLAS_NUM_THREADS"] == "1"
    assert "--xla_cpu_multi_thread_eigen=false" in p.env["XLA_FLAGS"]


def test_cpu_fewer_workers_than_cores_gets_disjoint_blocks():
  cores = tuple(range(8))
  got = [placement.worker_placement("cpu", i, 3, cores=cores) for i in range(3)]
  assert [p.cpu_affinity for p in got] == [(0, 1), (2, 3), (4, 5)]
  assert all(p.env["OMP_NUM_THREADS"] == "2" for p in got)
  assert all("multi_thread_eigen" not in p.env["XLA_FLAGS"] for p in got)


def test_cpu_keeps_user_xla_flags():
  p = placement.worker_placement("cpu", 0, 4, cores=(0, 1),
                                 base_xla_flags="--xla_dump_to=/tmp/x")
  assert p.env["XLA_FLAGS"].startswith("--xla_dump_to=/tmp/x ")


def test_gpu_round_robin_without_preallocation():
  devices = ("0", "1", "2")
  got = [placement.worker_placement("gpu", i, 7, devices=devices)
         for i in range(7)]
  assert [p.env["CUDA_VISIBLE_DEVICES"] for p in got] == [
      "0", "1", "2", "0", "1", "2", "0"]
  for p in got:
    assert p.env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert p.env["JAX_PLATFORMS"] == "gpu"
    assert p.cpu_affinity is None


def test_gpu_uses_the_visible_ids_not_positions():
  p = placement.worker_placement("gpu", 1, 2, devices=("4", "6"))
  assert p.env["CUDA_VISIBLE_DEVICES"] == "6"


def test_tpu_one_chip_per_worker_with_its_own_port():
  got = [placement.worker_placement("tpu", i, 4, devices=range(4))
         for i in range(4)]
  assert [p.env["TPU_VISIBLE_CHIPS"] for p in got] == ["0", "1", "2", "3"]
  ports = {p.env["TPU_PROCESS_PORT"] for p in got}
  assert len(ports) == 4
  for p in got:
    assert p.env["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,1,1"
    assert p.env["TPU_PROCESS_BOUNDS"] == "1,1,1"
    assert p.env["TPU_PROCESS_ADDRESSES"] == (
        f"localhost:{p.env['TPU_PROCESS_PORT']}")
    assert p.env["CLOUD_TPU_TASK_ID"] == "0"
    assert p.env["JAX_PLATFORMS"] == "tpu"


def test_tpu_refuses_more_workers_than_chips():
  with pytest.raises(ValueError, match="one worker per chip"):
    placement.worker_placement("tpu", 0, 5, devices=range(4))


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_accelerator_without_devices_is_an_error(platform):
  with pytest.raises(ValueError, match="no .* devices"):
    placement.worker_placement(platform, 0, 1, devices=())


@pytest.mark.parametrize("kwargs", [
    dict(platform="metal", worker_index=0, num_workers=1),
    dict(platform="cpu", worker_index=2, num_workers=2),
    dict(platform="cpu", worker_index=0, num_workers=0),
])
def test_bad_arguments(kwargs):
  with pytest.raises(ValueError):
    placement.worker_placement(**kwargs)


def test_mapping_is_pure():
  a = placement.worker_placement("cpu", 1, 3, cores=(0, 1, 2, 3))
  b = placement.worker_placement("cpu", 1, 3, cores=(0, 1, 2, 3))
  assert a == b


def test_host_placement_is_cpu_single_threaded():
  p = placement.host_placement()
  assert p.env["JAX_PLATFORMS"] == "cpu"
  assert p.env["OMP_NUM_THREADS"] == "1"
  assert p.cpu_affinity is None


def test_cpu_workers_return_big_buffers_to_the_os():
  env = placement.worker_placement("cpu", 0, 40, cores=(0, 1)).env
  assert env["MALLOC_ARENA_MAX"] == "2"
  assert int(env["MALLOC_MMAP_THRESHOLD_"]) <= 2**20
  # Workers with cores of their own keep glibc's faster defaults.
  alone = placement.worker_placement("cpu", 0, 2, cores=(0, 1)).env
  assert "MALLOC_MMAP_THRESHOLD_" not in alone


@pytest.mark.parametrize("platform,devices", [("cpu", ()), ("gpu", ("0",)),
                                              ("tpu", ("0",))])
def test_workers_yield_to_the_server(platform, devices):
  p = placement.worker_placement(platform, 0, 1, devices=devices, cores=(0, 1))
  assert p.nice == placement.WORKER_NICE > 0
  assert placement.host_placement().nice == 0
