"""`batchd simulate`: a job trace replayed through the scheduler in virtual time.

trace (reading traces: the Alibaba GPU trace, batchd's own CSV), engine (the event loop
around `batchd.scheduler.decide`, the same cycle the controller runs), measures (waits,
GPU-hours, borrowing, reclaim, fairness). Nothing of the daemon imports this package, and
it reads no clock and touches no store: a run is a function of its inputs.
"""
