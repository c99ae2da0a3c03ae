"""Helpers for the priority tests: the recorded fair-share scenarios."""

import json
from pathlib import Path

SCENARIOS = Path("/work/shared/scenarios/fairshare")


def load_case(name):
    return json.loads((SCENARIOS / f"{name}.json").read_text())
