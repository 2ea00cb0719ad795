"""Whether `dist.destroy_process_group()` really destroyed the gloo group, for the distributed tests.

gloo's worker threads (named `pt_gloo_runloop`) are joined when the group's last reference goes.
destroy_process_group drops torch's own references, with the GIL released; an object that still
holds the group (a DDP model's reducer, a DeviceMesh) destroys it later, in its own destructor:
with the GIL held (a reducer), which deadlocks against a worker that needs the GIL to free its
last finished work, or during interpreter finalization. Zero workers after destroy_process_group
is the safe teardown; a test asserts it.

As a script, under torchrun: `gloo_teardown.py SCRIPT ARGS...` runs SCRIPT as `__main__` and prints
`gloo worker threads after destroy_process_group: N` each time the script destroys its group.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

MARK = "gloo worker threads after destroy_process_group:"


def gloo_worker_threads() -> int:
    """This process's live gloo worker threads (Linux: the thread names in /proc)."""
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            count += Path(f"/proc/self/task/{tid}/comm").read_text().strip() == "pt_gloo_runloop"
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return count


def _run_script(script: str, args: list[str]) -> None:
    import torch.distributed as dist

    destroy = dist.destroy_process_group

    def checked(*a, **kw):
        destroy(*a, **kw)
        print(f"{MARK} {gloo_worker_threads()}", flush=True)

    dist.destroy_process_group = checked
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    _run_script(sys.argv[1], sys.argv[2:])
