"""Chargeback (issue 6): prices, hourly rollups, reports, efficiency.

Submodules that the CLI imports (`prices`, `render`, `html`) use the standard library
only; `rollup`, `report`, `efficiency` and `routes` run in the daemon."""
