"""Slurm's host-list syntax, one implementation for the daemon and the commands."""

import pytest

from batchd.slurm.hostlist import compress, expand


@pytest.mark.parametrize("names, text", [
    (["gpu01", "gpu02", "gpu04", "vm"], "gpu[01-02,04],vm"),
    (["node1", "node2"], "node[1-2]"),
    (["n9", "n10", "n11"], "n[9-11]"),
    (["vm"], "vm"),
    (["gpu01", "gpu01"], "gpu01"),
    (["gpu2", "gpu1"], "gpu[1-2]"),
    (["a1", "b2", "a3", "a02"], "a[1,3],b2,a02"),
    ([], ""),
])
def test_compress(names, text):
    assert compress(names) == text


@pytest.mark.parametrize("text, names", [
    ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
    ("vm", ["vm"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]),
    ("", []),
    (None, []),
])
def test_expand(text, names):
    assert expand(text) == names


def test_round_trip():
    names = ["gpu01", "gpu02", "gpu03", "gpu10", "cpu7"]
    assert expand(compress(names)) == names


def test_unbalanced():
    with pytest.raises(ValueError):
        expand("gpu[01-02")
