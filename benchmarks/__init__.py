"""modelgraft's benchmark suite: ``python -m benchmarks.run`` measures the budgets of docs/design.md, "Budgets".

A script, not tests: timings are reported and judged against budgets, never asserted, because a
loaded CI machine would turn a timed assertion into a flaky test. Every measurement that needs a
clean slate (wall time of a whole command, peak memory) runs in its own child process.
"""
