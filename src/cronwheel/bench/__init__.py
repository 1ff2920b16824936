"""``cronwheel bench``: workloads run against a real store with the scheduler and workers
as separate OS processes, as in production."""
