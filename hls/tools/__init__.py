"""Maintainer tools of the kernel toolkit, run by hand: the reserved-name probe."""
