"""Hostile-input probe: run a catalogue of inputs against a checkout and count, by class,
how many are handled cleanly and how many are defects.

    python tests/hostile/probe.py [CHECKOUT] [--json OUT] [--only CLASS]

Each input runs in a fresh folder, in its own process, with a 20 s timeout and a 3 GB address-space
limit (so a read of /dev/zero fails instead of eating the machine). Clean means: an expected error
is exactly one line on stderr with exit status 2 (no traceback, no "internal error"); an expected
success exits 0; nothing ran that the input smuggled in (no PWNED file), nothing was written outside
the output folder, library calls raise the toolkit's own error, and state is unchanged after an
error. A hang (timeout), a crash (signal), a traceback or a multi-line error is a defect.
Not collected by pytest (no test_ prefix): it takes a few minutes and compiles a kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PY = sys.executable
TIMEOUT = 20


@dataclass
class Case:
    cls: str
    name: str
    argv: list[str] | None = None  # CLI: optimusnic ARGV ({tmp}, {proj}, {reg} substituted)
    code: str | None = None  # Python: prints CLEAN, or anything else for a defect
    expect: str = "error"  # CLI: "error" (one line, exit 2) or "ok" (exit 0)
    setup: dict[str, object] = field(default_factory=dict)  # file name -> text/bytes/"FIFO"/"PROJECT"/"DIR"
    big_memory: bool = False
    marker: str | None = None  # injection: a defect only if this text reaches a generated file


# --- the catalogue -----------------------------------------------------------------------------------

U55C_NEW = {  # a complete new target, so a field override is the only difference
    "name": "My card", "part": "xcu55c-fsvh2892-2L-e", "flow": "xrt", "platform": "my_platform_1",
    "kernel_clock_mhz": 300,
    "memory": {"kind": "HBM2", "capacity_bytes": 1 << 30, "peak_bandwidth_bytes_per_s": 10**11, "channels": 8,
               "channel_capacity_bytes": 1 << 27, "channel_bandwidth_bytes_per_s": 12_500_000_000,
               "bank_prefix": "HBM"},
    "network": {"ports": 1, "line_rate_gbps": 100},
}


def targets(over: dict, key: str = "mycard") -> str:
    entry = json.loads(json.dumps(U55C_NEW))
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(entry.get(k), dict):
            entry[k].update(v)
        else:
            entry[k] = v
    return json.dumps({"targets": {key: entry}})


CXX_INJECT = 'x\n#include <cstdlib>\n[[maybe_unused]] static int pwn = std::system("touch {tmp}/PWNED");\n//'
INJECT = {
    "name: newline + C++ that runs a shell command when csim loads": {"name": CXX_INJECT},
    "name: shell substitution": {"name": "My $(touch {tmp}/PWNED) card"},
    "name: Tcl command substitution": {"name": "x [exec touch {tmp}/PWNED]"},
    "name: closes a C comment": {"name": "x */ int pwn; /*"},
    "name: backslash continues a comment": {"name": "x \\"},
    "part: Tcl command after a semicolon": {"part": "xcu55c; exec touch {tmp}/PWNED"},
    "part: newline into run_hls.tcl": {"part": "xcu55c\nexec touch {tmp}/PWNED"},
    "platform: Makefile shell": {"platform": "p $(shell touch {tmp}/PWNED)"},
    "platform: newline into link.cfg": {"platform": "p\n[connectivity]\nnk=evil:1"},
    "flow_note: newline into link.cfg comment": {"flow": "versal", "platform": None, "flow_note": "x\nsp=evil"},
    "memory.bank_prefix: brackets": {"memory": {"bank_prefix": "HBM]; exec touch {tmp}/PWNED; #"}},
    "memory.kind: newline": {"memory": {"kind": "HBM2\n#pragma evil"}},
    "network.kind: newline": {"network": {"kind": "QSFP\nevil"}},
    "family: spaces": {"family": "virtex; exec id"},
}

MALFORMED_TARGETS = {
    "a JSON list": "[1, 2]",
    "a JSON string": '"u55c"',
    "targets is a list": '{"targets": []}',
    "empty targets": '{"targets": {}}',
    "target is a string": '{"targets": {"u55c": "x"}}',
    "clock 1e400": '{"targets": {"u55c": {"kernel_clock_mhz": 1e400}}}',
    "clock NaN": '{"targets": {"u55c": {"kernel_clock_mhz": NaN}}}',
    "clock -300": '{"targets": {"u55c": {"kernel_clock_mhz": -300}}}',
    "clock a string": '{"targets": {"u55c": {"kernel_clock_mhz": "300"}}}',
    "clock true": '{"targets": {"u55c": {"kernel_clock_mhz": true}}}',
    "channels a string": '{"targets": {"u55c": {"memory": {"channels": "8"}}}}',
    "channels 1e300": '{"targets": {"u55c": {"memory": {"channels": 1e300}}}}',
    "channels 0": '{"targets": {"u55c": {"memory": {"channels": 0}}}}',
    "capacity 1e400": '{"targets": {"u55c": {"memory": {"capacity_bytes": 1e400}}}}',
    "memory a list": '{"targets": {"u55c": {"memory": [1]}}}',
    "network null": '{"targets": {"u55c": {"network": null}}}',
    "line rate inf": '{"targets": {"u55c": {"network": {"line_rate_gbps": 1e999}}}}',
    "bank_slr of the wrong length": '{"targets": {"u55c": {"memory": {"bank_slr": [0, 1]}}}}',
    "bank_slr strings": '{"targets": {"u55c": {"memory": {"bank_slr": ["a"]}}}}',
    "slrs 0": '{"targets": {"u55c": {"slrs": 0}}}',
    "usable_fraction 5": '{"targets": {"u55c": {"usable_fraction": 5}}}',
    "resources a string": '{"targets": {"u55c": {"resources": "lots"}}}',
    "unknown field": '{"targets": {"u55c": {"colour": "red"}}}',
    "missing fields (new target)": '{"targets": {"x": {"name": "x"}}}',
    "not UTF-8": b"\xff\xfe\x00",
    "100,000 nested brackets": "[" * 100_000,
    "TOML with wrong types": ("t.toml", '[targets.u55c]\nkernel_clock_mhz = "fast"\n'),
}

EDITS = {  # project manifest edits, then `optimusnic csim PROJECT`
    "spec.out_dtype fp32 -> bf16": "m['spec']['out_dtype'] = 'bf16'",
    "spec.grad_dtype fp32 -> fp16": "m['spec']['grad_dtype'] = 'fp16'",
    "spec.optimizer adamw -> adam": "m['spec']['optimizer'] = 'adam'",
    "spec.lanes 4 -> 16": "m['spec']['lanes'] = 16",
    "spec.lanes 3": "m['spec']['lanes'] = 3",
    "spec.name to another name": "m['spec']['name'] = 'other_kernel'",
    "spec a list": "m['spec'] = []",
    "spec missing": "m.pop('spec')",
    "register_map offset": "m['register_map']['args'][0]['offset'] = 20",
    "register_map stripes": "m['register_map']['stripes']['state'] = 2",
    "sizing lanes": "m['sizing']['lanes'] = 8",
    "banks": "m['banks'][0]['banks']['grad0'] = 'HBM[31]'",
    "a file's sha256": "m['files']['hls/optimusnic_adamw.cpp'] = '0' * 64",
    "files: ../ entry": "m['files']['../escape.cpp'] = '0' * 64",
    "target.key ../escaped": "m['target']['key'] = '../escaped'",
    "manifest is []": "m = []",
    "manifest is {}": "m = {}",
    "manifest is a string": "m = 'x'",
}


def catalogue() -> list[Case]:
    cases: list[Case] = []
    # 1. code injection through a targets file
    for name, over in INJECT.items():
        text = targets(over)
        if name.startswith("name: newline"):  # generate, then csim: the library would run the command
            cases.append(Case("injection", name, code="""
import subprocess, sys, os
from optimusnic.cli import main
rc = main(['generate', '--target', 'mycard', '--targets-file', 't.json', '--lanes', '4', '-o', 'out'])
if rc == 0:
    main(['csim', 'out', '--elements', '64', '--steps', '1'])
print('DEFECT: ran the injected command' if os.path.exists('PWNED') else
      ('CLEAN' if rc == 2 else 'DEFECT: accepted the name'))
""", setup={"t.json": text}))
        else:
            value = next(iter(over.values()))
            value = next(iter(value.values())) if isinstance(value, dict) else value
            if name.startswith("flow_note"):
                value = over["flow_note"]
            cases.append(Case("injection", name, argv=["generate", "--target", "mycard", "--targets-file",
                                                       "{tmp}/t.json", "--lanes", "4", "-o", "{tmp}/out"],
                              setup={"t.json": text}, marker=value))
    cases.append(Case("injection", "target key with a path", argv=["generate", "--target", "x", "--targets-file",
                      "{tmp}/t.json", "-o", "{tmp}/out"], setup={"t.json": targets({}, key="../x")}))
    # 2. malformed targets files
    for name, text in MALFORMED_TARGETS.items():
        fname, body = text if isinstance(text, tuple) else ("t.json", text)
        cases.append(Case("targets file", name, argv=["size", "--target", "u55c", "--params", "1e9", "--json",
                                                      "--targets-file", "{tmp}/" + fname], setup={fname: body}))
    # 3. names that pass the identifier rule but cannot compile
    for n in ("std", "hls", "memcpy", "size_t", "uint64_t", "ap_uint", "LANES", "f32_beat", "printf", "NULL",
              "compute", "fp32_add", "logic", "optimusnic_csim_run"):
        cases.append(Case("kernel names", n, argv=["generate", "--target", "u55c", "--name", n, "-o", "{tmp}/out"]))
    # 4. edited projects
    for name, edit in EDITS.items():
        cases.append(Case("edited project", name, code=f"""
import json, subprocess, sys
m = json.load(open('proj/manifest.json'))
{edit}
open('proj/manifest.json', 'w').write(json.dumps(m))
r = subprocess.run([sys.executable, '-m', 'optimusnic.cli', 'csim', 'proj', '--elements', '200', '--steps', '1'],
                   capture_output=True, text=True, timeout=60)
lines = r.stderr.strip().splitlines()
ok = r.returncode == 2 and len(lines) == 1 and 'Traceback' not in r.stderr and 'internal error' not in r.stderr
print('CLEAN' if ok else f'DEFECT: exit {{r.returncode}}, {{len(lines)}} stderr line(s): {{r.stderr.strip()[-150:]!r}}'
      f' stdout {{r.stdout.strip()[-80:]!r}}')
""", setup={"proj": "PROJECT"}))
    cases.append(Case("edited project", "edited kernel source (p - u -> p + u)", code="""
import subprocess, sys
from pathlib import Path
f = Path('proj/hls/optimusnic_adamw.cpp')
f.write_text(f.read_text().replace('p = p - u;', 'p = p + u;'))
r = subprocess.run([sys.executable, '-m', 'optimusnic.cli', 'csim', 'proj', '--elements', '200', '--steps', '1'],
                   capture_output=True, text=True, timeout=60)
ok = r.returncode == 2 and 'optimusnic_adamw.cpp' in r.stderr and len(r.stderr.strip().splitlines()) == 1
print('CLEAN' if ok else f'DEFECT: exit {r.returncode}: {r.stdout.strip()[-60:]!r} {r.stderr.strip()[-100:]!r}')
""", setup={"proj": "PROJECT"}))
    for backend in ("csim", "golden"):
        cases.append(Case("edited project", f"open_device({backend!r}, project_dir=...) with spec.out_dtype edited",
                          code=f"""
import json
import numpy as np
m = json.load(open('proj/manifest.json'))
m['spec']['out_dtype'] = 'bf16'
open('proj/manifest.json', 'w').write(json.dumps(m))
from hls.errors import UserError
from pynq_driver import open_device, ShardState
from hls.golden import Hyper
try:
    dev = open_device({backend!r}, project_dir='proj')
    s = ShardState(dev, np.zeros(1000, np.float32))
    for i in range(5):
        s.step(np.ones(1000, np.float32), Hyper(step=i + 1))
    print('DEFECT: ran an edited project')
except UserError as e:
    print('CLEAN')
""", setup={"proj": "PROJECT"}, big_memory=True))
    # 5. path escape through the registry
    cases.append(Case("path escape", "register(): manifest target.key ../escaped", code="""
import json, os
from pathlib import Path
from hls import registry
from hls.errors import UserError
m = json.load(open('proj/manifest.json'))
m['target']['key'] = '../escaped'
os.makedirs('escaped/optimusnic_adamw.reports')
Path('k.xclbin').write_bytes(b'xclbin2' + bytes(600))
try:
    registry.register(Path('k.xclbin'), m, {}, {}, root=Path('regX'), extra_files=[])
except UserError:
    pass
bad = Path('escaped/optimusnic_adamw.xclbin').exists() or not Path('escaped/optimusnic_adamw.reports').exists()
print('DEFECT: wrote or deleted outside the registry' if bad else 'CLEAN')
""", setup={"proj": "PROJECT"}))
    for target, name in (("u55c", "../../x"), ("/tmp", "x"), ("..", "x")):
        cases.append(Case("path escape", f"entry_paths({target!r}, {name!r})", code=f"""
from pathlib import Path
from hls import registry
try:
    x, m = registry.entry_paths({target!r}, {name!r}, Path('reg'))
    inside = Path('reg').resolve() in x.resolve().parents
    print('CLEAN' if inside else 'DEFECT: ' + str(x))
except Exception as e:
    print('CLEAN' if type(e).__name__ in ('UserError', 'Invalid') else 'DEFECT: ' + repr(e))
"""))
    # 6. unbounded work
    cases += [
        Case("unbounded", "targets file is a FIFO", argv=["targets", "--targets-file", "{tmp}/fifo"],
             setup={"fifo": "FIFO"}),
        Case("unbounded", "targets file is /dev/zero", argv=["targets", "--targets-file", "/dev/zero"]),
        Case("unbounded", "targets file of 2 MB", argv=["targets", "--targets-file", "{tmp}/big.json"],
             setup={"big.json": '{"targets": {"u55c": {"name": "' + "x" * (2 << 20) + '"}}}'}),
        Case("unbounded", "project manifest is a FIFO", code="""
import os, subprocess, sys
os.remove('proj/manifest.json'); os.mkfifo('proj/manifest.json')
r = subprocess.run([sys.executable, '-m', 'optimusnic.cli', 'csim', 'proj'], capture_output=True, text=True, timeout=15)
print('CLEAN' if r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 else 'DEFECT ' + r.stderr[-100:])
""", setup={"proj": "PROJECT"}),
        Case("unbounded", "registry manifest is a FIFO", argv=["bitstreams", "verify", "--dir", "{tmp}/reg"],
             setup={"reg/u55c/k.manifest.json": "FIFO"}, expect="exit1"),
        Case("unbounded", "xclbin is a FIFO", code=REGISTERED.replace("@XCLBIN@", "FIFO"),
             setup={"proj": "PROJECT"}),
        Case("unbounded", "xclbin with 0xFFFFFFFF sections", code=REGISTERED.replace("@XCLBIN@", "COUNT"),
             setup={"proj": "PROJECT"}),
        Case("unbounded", "xclbin section past the end", code=REGISTERED.replace("@XCLBIN@", "OFFSET"),
             setup={"proj": "PROJECT"}),
    ]
    for name, body in CHECKPOINT_FILES.items():
        cases.append(Case("unbounded" if name in ("FIFO", "/dev/zero", "zip bomb (0.5 MB -> 1.5 GB)")
                          else "checkpoint", f"checkpoint: {name}", code=CHECKPOINT_CODE.replace("@BODY@", body)))
    # 7. half-changed state
    for name, edit in OPTIM_ERRORS.items():
        cases.append(Case("all or nothing", name, code=OPTIM_CODE.replace("@EDIT@", edit), big_memory=True))
    # 8. CLI errors: one line, exit status 2
    for argv in CLI_ERRORS:
        cases.append(Case("cli errors", " ".join(argv)[:70], argv=list(argv), setup={"file": "a file"}))
    for argv in CLI_OK:
        cases.append(Case("cli errors", "ok: " + " ".join(argv)[:66], argv=list(argv), expect="ok"))
    return cases


REGISTERED = """
import json, os, struct, subprocess, sys, time
from pathlib import Path
from hls import registry
from hls.manifest import load_manifest
kind = '@XCLBIN@'
head = bytearray(b'xclbin2\\0' + bytes(1992))
struct.pack_into('<Q', head, 304, 2000)
if kind == 'COUNT':
    struct.pack_into('<I', head, 448, 0xFFFFFFFF)
elif kind == 'OFFSET':
    struct.pack_into('<I', head, 448, 1)
    struct.pack_into('<I16s4xQQ', head, 456, 0, b'BITSTREAM', 1990, 10**9)
Path('k.xclbin').write_bytes(bytes(head))
m = json.load(open('proj/manifest.json'))
registry.register(Path('k.xclbin'), m, {}, {}, root=Path('reg'))
if kind == 'FIFO':
    x = next(Path('reg').glob('*/*.xclbin')); x.unlink(); os.mkfifo(x)
t0 = time.monotonic()
r = subprocess.run([sys.executable, '-m', 'optimusnic.cli', 'bitstreams', 'verify', '--dir', 'reg'],
                   capture_output=True, text=True, timeout=15)
ok = r.returncode in (1, 2) and 'Traceback' not in r.stderr and 'internal error' not in r.stderr
print('CLEAN' if ok else f'DEFECT: exit {r.returncode} {r.stderr[-120:]!r}')
"""

CHECKPOINT_FILES = {
    "FIFO": "os.mkfifo('c.npz')",
    "/dev/zero": "os.symlink('/dev/zero', 'c.npz')",
    "zip bomb (0.5 MB -> 1.5 GB)": "bomb()",
    "not a zip": "Path('c.npz').write_bytes(b'hello' * 100)",
    "empty": "Path('c.npz').write_bytes(b'')",
    "header n is a string": "edit(lambda h: h.update(n='1000'))",
    "header n = 1e30": "edit(lambda h: h.update(n=10**30))",
    "header step = -1": "edit(lambda h: h.update(step=-1))",
    "header step = 1e40": "edit(lambda h: h.update(step=10**40))",
    "header spec is a list": "edit(lambda h: h.update(spec=[]))",
    "header sha256 missing": "edit(lambda h: h.pop('sha256'))",
    "header sha256 is a list": "edit(lambda h: h.update(sha256=[]))",
    "header is a JSON list": "edit(lambda h: [])",
    "header is not JSON": "edit(lambda h: b'{')",
    "header format other": "edit(lambda h: h.update(format='x'))",
    "header unknown field": "edit(lambda h: h.update(evil=1))",
    "member of the wrong dtype": "members(params=np.zeros(1000, np.float64))",
    "member 2-D": "members(exp_avg=np.zeros((10, 100), np.float32))",
    "member object array": "members(exp_avg_sq=np.array([None] * 1000, dtype=object))",
    "extra member": "members(evil=np.zeros(1, np.float32))",
}

CHECKPOINT_CODE = """
import io, json, os, zipfile
from pathlib import Path
import numpy as np
from hls.spec import KernelSpec
from hls.golden import Hyper
from pynq_driver import open_device, ShardState
from pynq_driver.errors import StateFileError
dev = open_device('golden', KernelSpec())
s = ShardState(dev, np.arange(1000, dtype=np.float32))
s.step(np.ones(1000, np.float32), Hyper(step=1))
s.save('good.npz')
good = {n: zipfile.ZipFile('good.npz').read(n) for n in zipfile.ZipFile('good.npz').namelist()}
def npy(a):
    b = io.BytesIO(); np.save(b, a, allow_pickle=True); return b.getvalue()
def write(ms, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile('c.npz', 'w', compression=compress) as z:
        for k, v in ms.items(): z.writestr(k, v)
def edit(f):
    h = json.loads(np.load(io.BytesIO(good['header.npy'])).tobytes())
    r = f(h); h = h if r is None else r
    raw = h if isinstance(h, bytes) else json.dumps(h).encode()
    write({**good, 'header.npy': npy(np.frombuffer(raw, np.uint8))})
def members(**arrays):
    write({**good, **{k + '.npy': npy(v) for k, v in arrays.items()}})
def bomb():
    n = 1 << 27
    h = json.loads(np.load(io.BytesIO(good['header.npy'])).tobytes()); h['n'] = n
    with zipfile.ZipFile('c.npz', 'w', compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr('header.npy', npy(np.frombuffer(json.dumps(h).encode(), np.uint8)))
        head = npy(np.zeros(0, np.float32)).replace(b'(0,)', f'({n},)'.encode())[:128]
        for k in ('params', 'exp_avg', 'exp_avg_sq'):
            with z.open(k + '.npy', 'w', force_zip64=True) as w:
                w.write(head)
                for _ in range(4 * n >> 20): w.write(bytes(1 << 20))
@BODY@
before = s.state_dict()
import resource, time
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.monotonic()
try:
    ShardState.load('c.npz', dev)
    print('DEFECT: loaded')
except StateFileError:
    dt = time.monotonic() - t0
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    after = s.state_dict()
    same = all(before[k].tobytes() == after[k].tobytes() for k in ('params', 'exp_avg', 'exp_avg_sq'))
    if not same:
        print('DEFECT: state changed')
    elif dt > 3 or grew > 256:
        print(f'DEFECT: refused only after {dt:.1f} s and {grew:.0f} MB more memory')
    else:
        print('CLEAN')
except Exception as e:
    print('DEFECT: ' + type(e).__name__ + ': ' + str(e)[:80])
"""

OPTIM_ERRORS = {
    "NicAdamW: lr < 0 in group 1": "opt.param_groups[1]['lr'] = -1.0",
    "NicAdamW: betas out of range in group 1": "opt.param_groups[1]['betas'] = (0.9, 1.5)",
    "NicAdamW: a missing grad in group 1 (skipped as torch skips it)": "ps[1].grad = None",
    "NicAdamW: a sparse grad in group 1": "ps[2].grad = ps[2].grad.to_sparse()",
    "NicAdamW: eps NaN in group 1": "opt.param_groups[1]['eps'] = float('nan')",
    "NicAdamW: load_state_dict, wrong size in group 1": "LOAD",
}

OPTIM_CODE = """
import torch
from pynq_driver.optim.adam import NicAdamW
g = torch.Generator().manual_seed(0)
ps = [torch.nn.Parameter(torch.randn(n, generator=g)) for n in (40, 24, 16)]
opt = NicAdamW([{'params': [ps[0]]}, {'params': [ps[1], ps[2]], 'lr': 1e-2}], lr=1e-3, backend='golden')
def grads():
    for i, p in enumerate(ps): p.grad = torch.full_like(p, 0.01 * (i + 1))
def snap():
    return ([p.detach().clone() for p in ps], [(s.state_dict()['step'], s.state_dict()['params'].tobytes(),
            s.state_dict()['exp_avg'].tobytes()) for s in opt.shards()], repr(opt.param_groups))
grads(); opt.step(); sd = opt.state_dict(); grads(); opt.step()
edit = '''@EDIT@'''
grads()
if edit != 'LOAD':
    exec(edit)  # the bad input is in place before the snapshot: only the step may change nothing
before = snap()
try:
    if edit == 'LOAD':
        last = max(sd['state'])
        sd['state'][last]['exp_avg'] = torch.zeros(3)
        sd['param_groups'][0]['lr'] = 0.123
        opt.load_state_dict(sd)
    else:
        opt.step()
    if edit == 'ps[1].grad = None':  # not an error: torch skips a parameter without a gradient
        after = snap()
        print('CLEAN' if torch.equal(before[0][1], after[0][1]) and not torch.equal(before[0][0], after[0][0])
              else 'DEFECT: the parameter without a gradient changed, or the others did not step')
    else:
        print('DEFECT: no error')
except Exception:
    after = snap()
    same = all(torch.equal(a, b) for a, b in zip(before[0], after[0])) and before[1:] == after[1:]
    print('CLEAN' if same else 'DEFECT: state changed before the error')
"""

CLI_ERRORS = [
    ("size", "--target", "u55c", "--params", "1e9", "--clock", "nan"),
    ("size", "--target", "u55c", "--params", "1e9", "--clock", "-300"),
    ("size", "--target", "u55c", "--params", "1e9", "--clock", "inf", "--json"),
    ("size", "--target", "u55c", "--params", "1e9", "--clock", "0"),
    ("size", "--target", "u55c", "--params", "1e9", "--clock", "1e9"),
    ("size", "--target", "u55c", "--params", "1e9", "--cards", "0"),
    ("size", "--target", "u55c", "--params", "1e9", "--cards", "-4"),
    ("size", "--target", "u55c", "--params", "1e9", "--lanes", "0"),
    ("size", "--target", "u55c", "--params", "1e9", "--lanes", "abc"),
    ("size", "--target", "u55c", "--params", "1e9", "--compute-units", "0"),
    ("size", "--target", "u55c", "--params", "1e9", "--compute-units", "99"),
    ("size", "--target", "u55c", "--params", "1e9", "--stripes", "0"),
    ("size", "--target", "u55c", "--params", "1e9", "--rate", "nan"),
    ("size", "--target", "u55c", "--params", "1e9", "--rate", "-1"),
    ("size", "--target", "u55c", "--params", "1e400"),
    ("size", "--target", "u55c", "--params", "nan"),
    ("size", "--target", "u55c"),
    ("size",),
    ("generate", "--target", "u55c", "-o", "{tmp}/file/sub"),
    ("generate", "--target", "u55c", "-o", "{tmp}/file"),
    ("generate", "--target", "u55c", "-o", ""),
    ("generate", "--target", "u55c", "--clock", "nan", "-o", "{tmp}/o"),
    ("generate", "--target", "u55c", "--lanes", "1e3", "-o", "{tmp}/o"),
    ("generate", "--target", "u55c", "--name", "a-b", "-o", "{tmp}/o"),
    ("csim", "{proj}", "--seed", "-1"),
    ("csim", "{proj}", "--steps", "0"),
    ("csim", "{proj}", "--steps", "-5"),
    ("csim", "{proj}", "--elements", "0"),
    ("csim", "{proj}", "--elements", "1e12"),
    ("csim", "{tmp}/missing"),
    ("csim", "{tmp}/file"),
    ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--plot", "{tmp}/x.xyz"),
    ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--plot", "{tmp}/file/x.png"),
    ("plan", "--model", "llama3-8b", "--gpus", "0", "--gpu", "h100", "--nic", "u55c"),
    ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--mfu", "nan"),
    ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--mfu", "2"),
    ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--seq", "0"),
    ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--link-efficiency", "-1"),
    ("sim", "--target", "u55c", "--elements", "inf"),
    ("sim", "--target", "u55c", "--elements", "nan"),
    ("sim", "--target", "u55c", "--elements", "-1"),
    ("sim", "--target", "u55c", "--runs", "0"),
    ("bench", "csim", "--threads", "-1"),
    ("bench", "csim", "--repeats", "0"),
    ("bench", "csim", "--params", "0"),
    ("demo", "--out", "{tmp}/file"),
    ("demo", "--steps", "1"),
    ("demo", "--world-size", "0"),
    ("bitstreams", "verify", "--dir", "{tmp}/missing"),
    ("bitstreams", "frobnicate"),
    ("build", "--target", "u55c", "--platform", "../../etc/x", "--dry-run"),
    ("build", "--target", "u55c", "--project", "{tmp}/missing", "--dry-run"),
    ("targets", "--bogus"),
    ("nosuchverb",),
    (),
]

CLI_OK = [
    ("size", "--target", "u55c", "--params", "1e9", "--clock", "50", "--json"),
    ("size", "--target", "u55c", "--params", "7B"),
    ("targets", "--json"),
    ("generate", "--target", "u55c", "--lanes", "4", "-o", "{tmp}/o"),
    ("build", "--target", "u55c", "--dry-run"),
    ("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c"),
]


# --- the runner ----------------------------------------------------------------------------------------

def _limit(big: bool):  # noqa: ANN202
    def apply() -> None:
        gb = 16 if big else 3
        resource.setrlimit(resource.RLIMIT_AS, (gb << 30, gb << 30))
    return apply


def _prepare(tmp: Path, setup: dict[str, object], project: Path) -> None:
    (tmp / "file").write_text("a file")
    for name, body in setup.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if body == "FIFO":
            os.mkfifo(path)
        elif body == "PROJECT":
            shutil.copytree(project, path)
        elif isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(str(body).replace("{tmp}", str(tmp)))


def run_case(case: Case, checkout: Path, project: Path) -> tuple[bool, str, float]:
    with tempfile.TemporaryDirectory(prefix="hostile-") as d:
        tmp = Path(d) / "w"
        tmp.mkdir()
        setup = dict(case.setup)
        if case.argv is not None and any("{proj}" in a for a in case.argv):
            setup["proj"] = "PROJECT"
        _prepare(tmp, setup, project)
        env = {**os.environ, "PYTHONPATH": str(checkout), "OPTIMUSNIC_TRACEBACK": ""}
        env.pop("OPTIMUSNIC_TRACEBACK")
        if case.argv is not None:
            argv = [a.replace("{tmp}", str(tmp)).replace("{proj}", str(tmp / "proj")) for a in case.argv]
            cmd = [PY, "-m", "optimusnic.cli", *argv]
        else:
            cmd = [PY, "-c", case.code.replace("{tmp}", str(tmp))]
        before = {p for p in tmp.rglob("*")}
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL, preexec_fn=_limit(case.big_memory), start_new_session=True)
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group, and only it
            proc.communicate()
            return False, f"hangs (> {TIMEOUT} s)", time.monotonic() - t0
        r = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        dt = time.monotonic() - t0
        if (tmp / "PWNED").exists():
            return False, "ran a command smuggled in by the input", dt
        if r.returncode < 0:
            return False, f"killed by signal {-r.returncode}", dt
        if case.code is not None:
            last = (r.stdout.strip().splitlines() or [""])[-1]
            if last == "CLEAN" and r.returncode == 0:
                return True, "clean", dt
            why = last or ((r.stderr.strip().splitlines() or ["no output"])[-1])
            return False, why[:160], dt
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        if "Traceback" in r.stderr:
            return False, "traceback: " + (lines[-1][:120] if lines else ""), dt
        if "internal error" in r.stderr:
            return False, lines[0][:140], dt
        if case.expect == "ok":
            return (r.returncode == 0, "clean" if r.returncode == 0 else f"exit {r.returncode}: "
                    + (lines[0][:120] if lines else ""), dt)
        if case.expect == "exit1":
            return (r.returncode in (1, 2) and len(lines) <= 1, f"exit {r.returncode}", dt)
        outside = {p for p in tmp.rglob("*")} - before
        outside = {p for p in outside if not str(p.relative_to(tmp)).startswith(("o", "out"))}
        if case.marker is not None and r.returncode == 0:
            marker = case.marker.replace("{tmp}", str(tmp))
            hits = [p.name for p in (tmp / "out").rglob("*") if p.is_file() and marker in p.read_text(errors="replace")]
            if hits:
                return False, f"accepted; the text reaches {', '.join(sorted(hits)[:4])} unescaped", dt
            return True, "accepted, but the text reaches no generated file", dt
        if r.returncode != 2:
            return False, f"exit {r.returncode} (accepted)" + (f"; wrote {len(outside)} file(s)" if outside else ""), dt
        if len(lines) != 1:
            return False, f"{len(lines)} stderr lines: {lines[-1][:100] if lines else ''}", dt
        if "--json" in (case.argv or []) and r.stdout.strip():
            return False, "printed output and failed", dt
        return True, "clean", dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkout", nargs="?", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    checkout = Path(args.checkout).resolve()
    with tempfile.TemporaryDirectory(prefix="hostile-proj-") as d:
        project = Path(d) / "proj"
        subprocess.run([PY, "-m", "optimusnic.cli", "generate", "--target", "u55c", "--lanes", "4", "-o", str(project)],
                       env={**os.environ, "PYTHONPATH": str(checkout)}, check=True, capture_output=True)
        results = []
        for case in catalogue():
            if args.only and args.only != case.cls:
                continue
            clean, why, dt = run_case(case, checkout, project)
            results.append({"class": case.cls, "input": case.name, "clean": clean, "detail": why,
                            "seconds": round(dt, 2)})
            print(f"{'clean ' if clean else 'DEFECT'} {dt:5.1f}s  [{case.cls}] {case.name!r}: {why}", flush=True)
    by = defaultdict(lambda: [0, 0])
    for r in results:
        by[r["class"]][0 if r["clean"] else 1] += 1
    print("\nclass              inputs  clean  defects")
    for cls, (c, bad) in by.items():
        print(f"{cls:<18} {c + bad:>6} {c:>6} {bad:>8}")
    total_c = sum(c for c, _ in by.values())
    total_b = sum(b for _, b in by.values())
    print(f"{'all':<18} {total_c + total_b:>6} {total_c:>6} {total_b:>8}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
