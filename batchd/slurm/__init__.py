"""Slurm's vocabulary: TRES, GRES and the GPU model, host lists, job arrays, dependencies,
time and memory units, association limits, output file patterns. Standard library only
and no I/O: the commands import it at every start (tests/test_import_boundaries.py)."""
