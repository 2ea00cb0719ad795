"""The demo (`make demo`, `optimusnic demo`): size, generate, simulate and train on the cards."""
