"""The `slow` marker of the compatibility tests (recorded cases that take minutes)."""

from __future__ import annotations


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    config.addinivalue_line("markers", "slow: a recorded Slurm case that takes minutes (time limit, requeue hold)")
