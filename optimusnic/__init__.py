"""OptimusNIC's application: the `optimusnic` command, the training-run planner, benchmarks, demo."""
