"""The verbs of the `optimusnic` command, one module each (see hls/cli.py)."""
