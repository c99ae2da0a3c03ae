"""The node agent's side: processes and devices. The agent, the launcher and the per-run
supervisor, the job's environment and isolation, the spool, NVML and sampling, the node
half of job steps. Imports neither batchd.server nor batchd.control
(tests/test_import_boundaries.py)."""
