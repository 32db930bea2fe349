"""The worker groups of conftest.py, over every test this run collected (those `-m` or `-k` leave out too): a graded
batch is read from one pytest-xdist worker group, so two workers still grade it once."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import CLASS_BATCHES, COLLECTED, worker_groups


def _groups() -> tuple[list[pytest.Item], dict[pytest.Item, str]]:
    items = list(COLLECTED)
    assert items, "conftest.py saw no collected test"
    return items, worker_groups(items)


def test_each_class_batch_is_read_from_one_group() -> None:
    items, groups = _groups()
    for fixture in CLASS_BATCHES:
        readers = {groups[item] for item in items if fixture in getattr(item, "fixturenames", ())}
        assert len(readers) <= 1, f"{fixture} is read from the groups {sorted(readers)}"


def test_each_problems_proof_is_read_from_one_group_of_its_own() -> None:
    items, groups = _groups()
    proof_groups = {groups[item] for item in items if "proofs" in getattr(item, "fixturenames", ())}
    for group in proof_groups:
        assert group.startswith("proofs-"), group
    per_problem: defaultdict[str, set[str]] = defaultdict(set)
    for item in items:
        params = getattr(item, "callspec", None)
        if "proofs" in getattr(item, "fixturenames", ()) and params is not None and "problem_id" in params.params:
            per_problem[params.params["problem_id"]].add(groups[item])
    assert all(len(found) == 1 for found in per_problem.values()), dict(per_problem)
    assert len(set().union(*per_problem.values())) == len(per_problem), "two problems share a group"


def test_a_modules_other_tests_share_one_group() -> None:
    """Its module fixtures are then set up once, whichever worker runs them."""
    items, groups = _groups()
    by_module: defaultdict[str, set[str]] = defaultdict(set)
    for item in items:
        if "proofs" not in getattr(item, "fixturenames", ()):
            by_module[str(item.path)].add(groups[item])
    split = {module: found for module, found in by_module.items() if len(found) > 1}
    assert not split, split


def test_the_scheduler_sees_each_tests_group(request: pytest.FixtureRequest) -> None:
    """Under `--dist loadgroup` (`make test`), a worker tells the scheduler a test's group in its node id: a group
    missing there is no group at all, and its batch is graded once in each worker that gets one of its tests."""
    if not request.config.getvalue("loadgroup"):
        pytest.skip("not run by a pytest-xdist worker under --dist loadgroup")
    _, groups = _groups()
    mine = next(item for item in COLLECTED if item is request.node)
    assert request.node.nodeid.endswith(f"@{groups[mine]}"), request.node.nodeid
