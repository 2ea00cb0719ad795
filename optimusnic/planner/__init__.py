"""The training-run planner (`optimusnic plan`): what a cluster's step costs with and without cards."""
