"""A run's folder and its checks before any work: the work directory, the disk budget, the
data's identity, the plan's checks and the demo's data cache.  Standard-library imports at
the top of each module where the command line needs them before pandas."""
