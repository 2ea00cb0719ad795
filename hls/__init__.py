"""OptimusNIC: Adam/AdamW optimizer kernels for Alveo SmartNICs, generated from one spec."""

__version__ = "0.1.0"
