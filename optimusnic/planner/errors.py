"""The planner's one error: impossible plan input (one line for the user, exit status 2)."""

from __future__ import annotations

from hls.errors import UserError


class PlanError(UserError):
    """Impossible plan input: no GPUs, an unknown preset, a model that fits under no scheme."""
