"""The controller's side: its scheduling cycle around batchd.scheduler.decide (the
snapshot, the cycle book, array folding, dependencies, usage accrual, node health).
Imported by the daemon only."""
