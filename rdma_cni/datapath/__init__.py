"""The datapath: the planner, the executor, sessions and teardown."""
