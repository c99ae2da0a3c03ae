"""Shared fixtures for the priority tests: the recorded fair-share scenarios."""

import pytest
from priority_cases import load_case


@pytest.fixture(scope="session")
def fair_tree_case():
    return load_case("fair_tree_slurm_test24_4")


@pytest.fixture(scope="session")
def classic_case():
    return load_case("classic_fairshare_doc_and_test24_1")
