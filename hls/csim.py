"""C simulation: the generated HLS kernel compiled with g++ into a shared library, run from numpy.

The library is the generated `hls/<name>.cpp`, unchanged, compiled against our own simulation
headers (`hls/include/`) plus a host harness (`optimusnic_csim_host.h`) that calls the kernel
chunk by chunk on the caller's buffers, in place, on every core. Flags keep IEEE-754 binary32
semantics (no fast-math, no FMA contraction), so the library must equal the golden model bit
for bit. This is the `csim` backend of the driver and the engine of the demo.

Builds are cached in `build/csim/` under a name made of the sha256 of everything that goes into
them (sources, headers, flags, compiler, CPU), so a changed kernel gets a new, uniquely named
library and an old one already loaded in this process is never reloaded under the same name.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from hls.errors import OptimusError, ToolMissing, UserError
from hls.generate import load_manifest, spec_from_manifest
from hls.golden import scalar_names
from hls.paths import BUILD_DIR, HLS_INCLUDE_DIR
from hls.spec import DTYPE_BYTES, KernelSpec

HOST_HEADER = "optimusnic_csim_host.h"
ABI_VERSION = 1
# IEEE-754 binary32 exactly as design.md section 3: no contraction into FMA, none of the
# fast-math relaxations (-fno-math-errno only drops errno writes; results are unchanged, and
# it lets sqrt compile to the correctly rounded vector instruction).
IEEE_FLAGS = (
    "-ffp-contract=off",
    "-fno-fast-math",
    "-fno-associative-math",
    "-fno-reciprocal-math",
    "-fno-finite-math-only",
    "-fsigned-zeros",
    "-fno-math-errno",
)
WARN_FLAGS = ("-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas")
BASE_FLAGS = ("-std=c++17", "-O3", "-fPIC", "-shared", "-pthread", *IEEE_FLAGS, *WARN_FLAGS)
NATIVE_FLAGS = ("-march=native",)
DEFAULT_CHUNK = 256  # elements per kernel call: 16 beats, so the dataflow FIFOs of one call stay in L1
MAX_ELEMENTS = (1 << 32) - 33  # the `n` register is 32 bits; the harness keeps a 32-element margin


class CsimError(OptimusError):
    """The generated kernel did not compile, or the library misbehaved."""


def compiler() -> str:
    cxx = os.environ.get("CXX") or "g++"
    path = shutil.which(cxx)
    if not path:
        raise ToolMissing(f"C++ compiler {cxx!r} not found; install g++ (apt-get install g++) or set CXX")
    return path


def _project(project_dir: Path) -> tuple[KernelSpec, Path]:
    project_dir = Path(project_dir)
    if not project_dir.is_dir():
        raise UserError(f"{project_dir}: no such directory; generate a project first (optimusnic generate -o DIR)")
    spec = spec_from_manifest(load_manifest(project_dir))
    source = project_dir / "hls" / f"{spec.name}.cpp"
    if not source.is_file():
        raise UserError(f"{source}: kernel source missing; regenerate the project (optimusnic generate)")
    return spec, source


def _cpu_id() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return os.uname().machine


def _tool_version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError as exc:
        raise ToolMissing(f"cannot run {cxx}: {exc}") from exc


def _first_errors(stderr: str, lines: int = 25) -> str:
    picked = [ln for ln in stderr.splitlines() if ln.strip()][:lines]
    return "\n".join(picked)


def compile_kernel(project_dir: Path, build_dir: Path | None = None) -> Path:
    """Compile the project's kernel into the C simulation library; returns the .so path (cached)."""
    spec, source = _project(project_dir)
    build_dir = Path(build_dir) if build_dir else BUILD_DIR / "csim"
    build_dir.mkdir(parents=True, exist_ok=True)
    cxx = compiler()
    unit = f'#include "{source.resolve()}"\n#include "{HOST_HEADER}"\nOPTIMUSNIC_CSIM_ENTRY({spec.name})\n'
    digest = hashlib.sha256()
    for part in (unit, source.read_text(), _tool_version(cxx), _cpu_id(), str(BASE_FLAGS), str(NATIVE_FLAGS)):
        digest.update(part.encode())
    for header in sorted(HLS_INCLUDE_DIR.glob("*.h")):
        digest.update(header.name.encode() + header.read_bytes())
    key = digest.hexdigest()[:16]
    lib = build_dir / f"lib{spec.name}_csim_{key}.so"
    if lib.is_file():
        return lib
    src = build_dir / f"{spec.name}_csim_{key}.cpp"
    src.write_text(unit)
    # Compile to a private name, then rename: concurrent builds never see a half-written library.
    fd, tmp = tempfile.mkstemp(prefix=lib.stem + ".", suffix=".tmp.so", dir=build_dir)
    os.close(fd)
    try:
        for extra in (NATIVE_FLAGS, ()):
            cmd = [cxx, *BASE_FLAGS, *extra, "-I", str(HLS_INCLUDE_DIR), "-o", tmp, str(src)]
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if result.returncode == 0:
                break
            if not extra or "march" not in result.stderr:  # only -march=native earns a second try
                raise CsimError(f"g++ failed to compile {source}:\n{_first_errors(result.stderr)}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


_GRAD_DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(np.uint16)}
_OUT_DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(np.uint16)}
_F32 = np.dtype(np.float32)


class CsimKernel:
    """The generated kernel as a callable: `run` updates numpy buffers in place, bit-exact to the golden model."""

    def __init__(self, project_dir: Path, build_dir: Path | None = None, threads: int | None = None) -> None:
        self.project_dir = Path(project_dir)
        self.spec: KernelSpec = _project(self.project_dir)[0]
        self.library = compile_kernel(self.project_dir, build_dir)
        self.threads = threads or max(1, min(os.cpu_count() or 1, 64))
        self.chunk = DEFAULT_CHUNK
        self._names = scalar_names(self.spec.optimizer)
        self._lib: ctypes.CDLL | None = ctypes.CDLL(str(self.library))
        ptr = ctypes.c_void_p
        u64 = ctypes.c_ulonglong
        self._run = self._lib.optimusnic_csim_run
        self._run.argtypes = [ptr, ptr, ptr, ptr, ptr, u64, ptr, ctypes.c_int, u64, u64]
        self._run.restype = ctypes.c_long
        self._direct = self._lib.optimusnic_csim_direct
        self._direct.argtypes = [ptr, ptr, ptr, ptr, ptr, u64, ptr, u64]
        self._direct.restype = ctypes.c_long
        abi = self._lib.optimusnic_csim_abi()
        if abi != ABI_VERSION:
            raise CsimError(f"{self.library}: harness ABI {abi}, expected {ABI_VERSION}; delete build/csim and retry")

    def scalar_bits(self, scalars: dict[str, int]) -> np.ndarray:
        """The scalar registers in register-map order as a uint32 array (validated)."""
        if not isinstance(scalars, dict) or set(scalars) != set(self._names):
            got = sorted(scalars) if isinstance(scalars, dict) else type(scalars).__name__
            raise ValueError(f"scalars: expected registers {', '.join(self._names)}; got {got}")
        values = []
        for name in self._names:
            value = scalars[name]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < 1 << 32:
                raise ValueError(f"scalars[{name!r}]: {value!r} is not a 32-bit register pattern")
            values.append(int(value))
        return np.array(values, dtype=np.uint32)

    def _check(self, grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, out: np.ndarray,
               n: int) -> None:
        if self._lib is None:
            raise CsimError("this CsimKernel is closed")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= int(n) <= MAX_ELEMENTS:
            raise ValueError(f"n: {n!r} must be an integer from 0 to {MAX_ELEMENTS}")
        spec = self.spec
        wanted = {"grad": _GRAD_DTYPES[spec.grad_dtype], "p": _F32, "m": _F32, "v": _F32,
                  "out": _OUT_DTYPES[spec.out_dtype]}
        for name, arr in (("grad", grad), ("p", p), ("m", m), ("v", v), ("out", out)):
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"{name}: expected a numpy array, got {type(arr).__name__}")
            if arr.dtype != wanted[name]:
                raise ValueError(f"{name}: expected {wanted[name]} for this kernel "
                                 f"({spec.grad_dtype} grad, {spec.out_dtype} out), got {arr.dtype}")
            if not arr.flags.c_contiguous:
                raise ValueError(f"{name}: must be C-contiguous")
            if name != "grad" and not arr.flags.writeable:
                raise ValueError(f"{name}: must be writeable (updated in place)")
            if arr.size < n:
                raise ValueError(f"{name}: has {arr.size} elements, fewer than n={n}")

    def run(self, grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, out: np.ndarray, n: int,
            scalars: dict[str, int]) -> None:
        """One optimizer step on the first `n` elements, in place on `p`, `m`, `v`; writes `out`."""
        self._check(grad, p, m, v, out, n)
        bits = self.scalar_bits(scalars)
        threads = self.threads if n >= 1 << 16 else 1  # below that, starting threads costs more than it saves
        rc = self._run(grad.ctypes.data, p.ctypes.data, m.ctypes.data, v.ctypes.data, out.ctypes.data, int(n),
                       bits.ctypes.data, threads, self.chunk, DTYPE_BYTES[self.spec.grad_dtype])
        if rc:
            raise CsimError(f"{self.spec.name}: kernel simulation reported {rc} stream underflow(s)/leftover beat(s)")

    def run_direct(self, grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, out: np.ndarray, n: int,
                   scalars: dict[str, int]) -> None:
        """One kernel call on whole-beat buffers, no harness chunking: how the card sees its buffers.

        Every buffer must hold whole 512-bit beats covering `n` (and the gradient whole beats of its
        dtype); the kernel's own tail handling then runs on the caller's memory.
        """
        self._check(grad, p, m, v, out, n)
        beats = -(-int(n) // 16)
        for name, arr, per_beat in (("grad", grad, 64 // grad.itemsize), ("p", p, 16), ("m", m, 16), ("v", v, 16),
                                    ("out", out, 64 // out.itemsize)):
            need = -(-beats * 16 // per_beat) * per_beat
            if arr.size < need:
                raise ValueError(f"{name}: run_direct needs whole beats, {need} elements for n={n}")
        bits = self.scalar_bits(scalars)
        rc = self._direct(grad.ctypes.data, p.ctypes.data, m.ctypes.data, v.ctypes.data, out.ctypes.data, int(n),
                          bits.ctypes.data, DTYPE_BYTES[self.spec.grad_dtype])
        if rc:
            raise CsimError(f"{self.spec.name}: kernel simulation reported {rc} stream underflow(s)/leftover beat(s)")

    def close(self) -> None:
        # ctypes cannot unload safely while references may remain; dropping ours is enough, and the
        # next build of a changed kernel gets a new file name.
        self._lib = None

    def __enter__(self) -> CsimKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- Checking a project against the golden model (used by `optimusnic csim` and the tests) ---

F32_SPECIALS = np.array(
    [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
     0x7F7FFFFE, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x3F800000],
    dtype=np.uint32,
).view(np.float32)
H16_SPECIALS = {
    "fp16": np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00,
                      0x7C01, 0x3C00], dtype=np.uint16),
    "bf16": np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0,
                      0x7F81, 0x3F80], dtype=np.uint16),
}


def make_inputs(spec: KernelSpec, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """p, m, v (fp32) and a gradient in the spec's dtype: realistic values with every special value mixed in.

    Specials (zeros of both signs, subnormals, the largest finite values, infinities, NaNs) are
    scattered at random positions, so they land in every lane and in the tail.
    """
    def specials(arr: np.ndarray, pool: np.ndarray, fraction: float = 0.1) -> np.ndarray:
        k = min(n, max(len(pool), int(n * fraction))) if n else 0
        where = rng.choice(n, size=k, replace=False) if k else np.zeros(0, dtype=np.int64)
        arr.view(pool.dtype)[where] = pool[rng.integers(0, len(pool), size=k)].view(pool.dtype)
        return arr

    p = specials(rng.standard_normal(n).astype(np.float32), F32_SPECIALS)
    m = specials((rng.standard_normal(n) * 1e-2).astype(np.float32), F32_SPECIALS)
    v = specials((np.abs(rng.standard_normal(n)) * 1e-4).astype(np.float32), F32_SPECIALS)
    g32 = (rng.standard_normal(n) * 1e-1).astype(np.float32)
    if spec.grad_dtype == "fp32":
        grad = specials(g32, F32_SPECIALS)
    elif spec.grad_dtype == "fp16":
        grad = specials(g32.astype(np.float16), H16_SPECIALS["fp16"].view(np.float16))
    else:
        from hls.golden import to_bf16_bits

        grad = specials(to_bf16_bits(g32), H16_SPECIALS["bf16"])
    return {"grad": grad, "p": p, "m": m, "v": v}


def check_project(kernel: CsimKernel, elements: int, steps: int, seed: int = 0) -> list[dict[str, object]]:
    """Run `steps` consecutive steps on the csim library and the golden model; one result per step and array."""
    from hls.golden import Hyper, adam_update, bits_equal, prepare_scalars

    spec = kernel.spec
    rng = np.random.default_rng(seed)
    state = make_inputs(spec, elements, rng)
    p, m, v = state["p"], state["m"], state["v"]
    gp, gm, gv = p.copy(), m.copy(), v.copy()
    out = np.zeros(elements, dtype=_OUT_DTYPES[spec.out_dtype])
    results: list[dict[str, object]] = []
    for step in range(1, steps + 1):
        grad = state["grad"] if step == 1 else make_inputs(spec, elements, rng)["grad"]
        # Vary the hyperparameters too, so every scalar register matters.
        hyper = Hyper(lr=1e-3 * step, weight_decay=0.01 * step, step=step, grad_scale=1.0 if step == 1 else 0.5,
                      bias_correction=step != 3)
        scalars = prepare_scalars(hyper, spec.optimizer)
        ref = adam_update(gp, gm, gv, grad, scalars, optimizer=spec.optimizer, grad_dtype=spec.grad_dtype,
                          out_dtype=spec.out_dtype)
        kernel.run(grad, p, m, v, out, elements, scalars.registers(spec.optimizer))
        for name, got, want in (("p", p, gp), ("m", m, gm), ("v", v, gv), ("out", out, ref)):
            bad = np.flatnonzero(~bits_equal(got, want))
            results.append({"step": step, "array": name, "elements": elements, "ok": not bad.size,
                            "mismatches": int(bad.size), "first_mismatch": int(bad[0]) if bad.size else None})
    return results
