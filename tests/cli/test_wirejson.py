"""batchd.cli.wirejson: the commands' JSON without the `json` package, byte for byte what
`json.dumps`/`json.loads` give, and the client never imports `json` or `re`."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchd.cli import wirejson

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@given(documents)
def test_dumps_is_json_dumps(doc):
    assert wirejson.dumps(doc) == json.dumps(doc)


@given(documents)
def test_loads_reads_json_dumps_back(doc):
    text = json.dumps(doc)
    assert wirejson.loads(text) == json.loads(text)
    assert wirejson.loads(text.encode()) == json.loads(text.encode())
    assert wirejson.loads(json.dumps(doc, indent=2, ensure_ascii=False)) == doc


def test_constants_and_whitespace():
    assert math.isnan(wirejson.loads("NaN")) and wirejson.loads(" [Infinity, -Infinity] \n") == [math.inf, -math.inf]
    assert wirejson.dumps(math.inf) == "Infinity"


@pytest.mark.parametrize("bad", ["", "  ", "{", '{"a": 1} x', "[1,]", b"\xff", "{'a': 1}"])
def test_bad_documents_raise_value_error(bad):
    with pytest.raises(ValueError):
        wirejson.loads(bad)


def test_unserializable_raises_type_error():
    with pytest.raises(TypeError):
        wirejson.dumps({"a": object()})


def test_a_submission_imports_neither_json_nor_re():
    # the modules sbatch adds to what the interpreter had at start (an editable install's
    # finder imports re itself; only what the command adds counts)
    code = ("import sys; before = set(sys.modules); import batchd.cli.sbatch, batchd.cli.client; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    added = set(out.stdout.split())
    assert not added & {"json", "json.decoder", "re", "enum", "socket", "selectors"}, added
