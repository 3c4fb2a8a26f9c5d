"""The services each pytest-xdist worker gets (tests/parallel.py)."""

from tests.parallel import first_block_sizes, long_ones_first, own_services


def test_each_worker_gets_its_own_redis_number_and_var_folder():
    environ = {
        "PYTEST_XDIST_WORKER": "gw2",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
        "PORTAL_CACHE_URL": "redis://127.0.0.1:6379/15",
        "PORTAL_VAR_DIR": "/srv/var",
    }
    own_services(environ)
    assert environ["CELERY_BROKER_URL"] == "redis://127.0.0.1:6379/2"
    assert environ["PORTAL_CACHE_URL"] == "redis://127.0.0.1:6379/2"
    assert environ["PORTAL_VAR_DIR"] == "/srv/var/test-gw2"


def test_a_process_a_test_starts_keeps_its_workers_numbers():
    # A Celery worker or server started by a test inherits the environment, worker name
    # included, and imports tests/parallel.py again: it must land on the same Redis database
    # as the test that queues its tasks, not the next one.
    environ = {"PYTEST_XDIST_WORKER": "gw0", "CELERY_BROKER_URL": "redis://h:6379/15"}
    own_services(environ)
    first = dict(environ)
    own_services(environ)
    assert environ == first
    assert environ["CELERY_BROKER_URL"] == "redis://h:6379/0"


def test_without_xdist_nothing_changes():
    environ = {"CELERY_BROKER_URL": "redis://h:6379/15"}
    own_services(environ)
    assert environ == {"CELERY_BROKER_URL": "redis://h:6379/15"}


def test_each_workers_first_block_starts_with_its_share_of_the_long_tests():
    items = [f"short{n}" for n in range(10)] + ["long-a", "long-b", "long-c"]
    ordered = long_ones_first(items, 2, lambda item: item.startswith("long"))
    assert sorted(ordered) == sorted(items)
    assert first_block_sizes(len(items), 2) == [6, 7]
    # xdist hands the first 6 to one worker and the other 7 to the second.
    assert ordered[:6] == ["long-a", "long-c", "short0", "short1", "short2", "short3"]
    assert ordered[6:] == ["long-b", "short4", "short5", "short6", "short7", "short8", "short9"]


def test_the_blocks_are_the_ones_worksteal_hands_out():
    from xdist.scheduler.worksteal import WorkStealingScheduling

    class Node:
        shutting_down = False

        def __init__(self, number):
            self.sent = []
            self.gateway = type("Gateway", (), {"id": f"gw{number}"})

        def send_runtest_some(self, indices):
            self.sent += indices

    class Config:
        def getoption(self, name):
            return None

        def getvalue(self, name):
            return ["4*popen"] if name == "tx" else None

    scheduler = WorkStealingScheduling(Config())
    nodes = [Node(number) for number in range(4)]
    collection = [f"t{n}" for n in range(2587)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    assert [len(node.sent) for node in nodes] == first_block_sizes(2587, 4)


def test_one_worker_keeps_the_collection_order():
    items = ["long", "short"]
    assert long_ones_first(items, 1, lambda item: item == "long") == items
