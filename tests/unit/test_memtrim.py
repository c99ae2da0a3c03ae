"""batchd.memtrim: the heap trim after a large reply (issue 17, RSS given back)."""

import sys

from batchd import memtrim


def test_give_back_trims_on_glibc_and_is_harmless_elsewhere():
    done = memtrim.give_back()
    assert isinstance(done, bool)
    if sys.platform == "linux" and memtrim._trim is not None:
        assert done
