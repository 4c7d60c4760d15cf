"""Helpers shared by the test modules: the marker rules, the tool table, the strace kill-point harness."""
