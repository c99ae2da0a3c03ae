"""The controller's -w/-x narrowing of a job's nodes: bounded expansion, and a stored
list that the door would refuse today leaves the job no node instead of no restriction."""

from batchd.control.controller import _allowed_nodes

PART = ["node1", "node2", "node3"]


def test_nodelist_and_exclude_narrow_the_partition():
    assert _allowed_nodes(PART, {"nodelist": "node[1-2]"}, 100) == ["node1", "node2"]
    assert _allowed_nodes(PART, {"exclude": "node2"}, 100) == ["node1", "node3"]


def test_a_list_past_the_limit_is_not_expanded_and_leaves_no_node():
    # two million names: never expanded (the cap counts first), and never ignored
    assert _allowed_nodes(PART, {"exclude": "node[1-2000000]"}, 10_000) == []
    assert _allowed_nodes(PART, {"nodelist": "node[1-2000000]"}, 10_000) == []


def test_a_malformed_stored_list_leaves_no_node():
    assert _allowed_nodes(PART, {"exclude": "node[1-"}, 100) == []
