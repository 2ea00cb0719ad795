"""The FSDP2 + NicAdamW example of docs/guides/train-with-nicadamw.md, as written, under torchrun
with 2 ranks (gloo on 127.0.0.1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from optimusnic.demo.run import free_port

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "train-with-nicadamw.md"


def test_fsdp2_example_runs(tmp_path):
    text = GUIDE.read_text()
    code = re.search(r"<!-- fsdp2-example -->\s*```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "example.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    # Each rank's stdout to a file of its own: two ranks printing at once interleave on one pipe.
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", str(free_port()), "--log-dir", str(tmp_path / "logs"), "--redirects", "1",
                        "example.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    outs = sorted((tmp_path / "logs").rglob("stdout.log"))
    lines = sorted(line for f in outs for line in f.read_text().splitlines() if line[:1] in "01")
    assert len(outs) == 2 and len(lines) == 2, [f.read_text() for f in outs]
    assert all(line.split()[-1] == "10.0" for line in lines), lines
    assert (tmp_path / "ckpt").is_dir()
