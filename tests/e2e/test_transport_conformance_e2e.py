"""The transport conformance suite on shared memory (spawned processes).

The tests are tests/unit/test_transport_conformance.py's, run here with the
kit that starts real processes; the unit folder runs them on threads, and
tests/e2e/test_ray_backend.py on Ray (on the Ray instance that file's tests
share).
"""

import pytest

# pylint: disable-next=wildcard-import,unused-wildcard-import
from test_transport_conformance import *


@pytest.fixture(params=["shared_memory"])
def kit(request):
  yield from make_kit(request)
