"""The transport conformance suite on shared memory (spawned processes).

The tests are tests/unit/test_transport_conformance.py's, run here with the
kit that starts real processes; the unit folder runs them on threads, and
tests/e2e/test_ray_backend.py on Ray (on the Ray instance that file's tests
share).
"""

import pytest

from test_transport_conformance import make_kit
from test_transport_conformance import (  # pylint: disable=unused-import
    test_a_pull_waits_for_the_first_publish_and_is_a_whole_center,
    test_commits_come_out_first_in_first_out_with_their_meta,
    test_a_full_queue_refuses_a_commit_until_one_is_handled,
    test_a_workers_done_comes_after_its_commits_and_once,
    test_the_supervisor_sees_what_is_in_flight_and_sets_progress,
    test_switches_stay_set_once_set,
    test_events_arrive_in_order_and_replies_answer_in_order,
    test_the_data_reads_back_whole,
    test_a_worker_elsewhere_pulls_its_own_commits_back,
    test_a_commit_carries_its_window_and_its_acknowledgement_the_next_plan)


@pytest.fixture(params=["shared_memory"])
def kit(request):
  yield from make_kit(request)
