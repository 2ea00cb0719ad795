"""Vitis stage: the build flow (vitis_hls, package_xo, v++), its reports and burst checks."""
