"""External tools run with a time limit: a compiler, yosys or a Vitis step that hangs (a planted
wrapper, a full disk, a licence server that never answers) ends in one line naming the tool.

The tool runs in a session of its own, so the limit ends the whole process group (g++ runs
cc1plus and as and ld; a shell wrapper its children), not only the process we started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

from hls.errors import OptimusError

TIMEOUT_ENV = "OPTIMUSNIC_TOOL_TIMEOUT_S"
# Far above what any tool takes here (a 16-lane g++ build ~1 min, yosys on the kernel top ~10 min,
# a Vitis step hours: build.py gives those their own limit), far below "forever".
DEFAULT_TIMEOUT_S = 1800.0
VERSION_TIMEOUT_S = 30.0  # `tool --version`


class ToolTimeout(OptimusError, TimeoutError):
    """An external tool did not finish within its time limit."""


def timeout_s(default: float = DEFAULT_TIMEOUT_S) -> float:
    """The time limit for one tool run: $OPTIMUSNIC_TOOL_TIMEOUT_S if set to a positive number."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            value = 0.0
        if value > 0 and value == value and value != float("inf"):
            return value
    return default


def run(cmd: Sequence[str], what: str, timeout: float | None = None, **kw: Any) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, **kw) with a time limit (default `timeout_s()`); on expiry the tool's whole
    process group is killed and ToolTimeout names `what`."""
    limit = timeout_s() if timeout is None else timeout
    kw.setdefault("check", False)
    check = kw.pop("check")
    inp = kw.pop("input", None)
    if inp is not None:
        kw["stdin"] = subprocess.PIPE
    if kw.pop("capture_output", False):
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    with subprocess.Popen(list(cmd), start_new_session=True, **kw) as proc:
        try:
            out, err = proc.communicate(inp, timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise ToolTimeout(f"{what}: did not finish within {limit:g} s and was stopped "
                              f"(raise the limit with {TIMEOUT_ENV}=SECONDS)") from None
        except BaseException:  # Ctrl-C: the tool must not run on behind us
            _kill_group(proc)
            raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.communicate(timeout=10)


__all__ = ["DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "VERSION_TIMEOUT_S", "ToolTimeout", "run", "timeout_s"]
