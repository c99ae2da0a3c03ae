"""What a request touches, on the daemon's API threads: the socket and its wire protocol,
the service (submit, change, cancel, accounts), the views squeue, scontrol and sacct
read, the request half of job steps. Imports nothing of batchd.node
(tests/test_import_boundaries.py)."""
