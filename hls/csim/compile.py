"""C simulation, building: the generated HLS kernel compiled with g++ into a shared library.

The library is the generated `hls/<name>.cpp`, unchanged, compiled at -std=c++14 (as run_hls.tcl)
against AMD's own C simulation headers `ap_int.h` and `hls_stream.h` (Apache-2.0, shipped in the
`hls4ml` wheel; `headers="amd"`, the default) or our stand-ins for them (`hls/csim/include/own/`,
`headers="own"`), plus our stand-ins for what AMD does not publish on PyPI (`hls/csim/include/`:
hls_vector.h, ap_axi_sdata.h, hls_math.h), plus the host harness (`hls/csim/harness/`). Flags keep
IEEE-754 binary32 semantics (no fast-math, no FMA contraction), so the library must equal the
golden model bit for bit. Vendor headers are system headers (their warnings are theirs); ours
build with -Wall -Wextra -Werror.

Builds are cached in `build/csim/` (with the sha256 of each library beside it, checked before it is
used) under a name made of the sha256 of everything that goes into
them (sources, headers, flags, compiler, CPU), so a changed kernel gets a new, uniquely named
library and an old one already loaded in this process is never reloaded under the same name.
Running the library is `hls.csim.kernel`; checking it against the golden model `hls.csim.check`.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from hls import proc, safe_io
from hls.errors import OptimusError, ToolMissing, UserError
from hls.manifest import load_manifest, spec_from_manifest
from hls.paths import BUILD_DIR, HLS_INCLUDE_DIR
from hls.spec import KernelSpec

HOST_HEADER = "optimusnic_csim_host.h"
HARNESS_DIR = Path(__file__).resolve().parent / "harness"
OWN_HEADERS_DIR = HLS_INCLUDE_DIR / "own"  # our ap_int.h and hls_stream.h, for headers="own"
# AMD's headers come from this wheel, installed without its dependencies (Makefile `deps`); the
# pin is also pyproject.toml's [tool.optimusnic] csim-headers (a test keeps the two equal).
HLS4ML_REQUIREMENT = "hls4ml==1.3.0"
AMD_HEADERS = ("ap_int.h", "ap_int_base.h", "ap_int_ref.h", "ap_common.h", "etc/ap_private.h", "hls_stream.h")
HEADER_SETS = ("amd", "own")
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
# C++14 as run_hls.tcl; -faligned-new because C++14 has no aligned operator new, so without it the
# std::deque inside AMD's hls::stream would put alignas(64) hls::vector beats at 16-byte addresses
# (an aligned vector load there faults).
# _GLIBCXX_DEQUE_BUF_SIZE: the bytes of one std::deque node in libstdc++ (512 by default, i.e. 8
# beats of 64 bytes). AMD's hls::stream is a std::deque, so with 512-byte nodes every 8th write
# of every stream allocated a node and every 8th read freed one, and the map of nodes was
# reallocated as a FIFO grew: a third of the time of a C simulation step. 4 KiB nodes hold 64
# beats (the harness recycles blocks of that size per thread). Only the node size changes, not
# what a stream holds or returns; the deques live inside this library, which exports nothing but
# its C functions (exports.map), so no std::deque crosses into code built with the default size.
DEQUE_FLAGS = ("-D_GLIBCXX_DEQUE_BUF_SIZE=4096",)
BASE_FLAGS = ("-std=c++14", "-faligned-new", "-O3", "-fPIC", "-shared", "-pthread", *DEQUE_FLAGS, *IEEE_FLAGS,
              *WARN_FLAGS)
NATIVE_FLAGS = ("-march=native",)
# The library exports its three optimusnic_csim_* functions and nothing else (see exports.map).
LINK_FLAGS = (f"-Wl,--version-script={HARNESS_DIR / 'exports.map'}",)
KERNEL_SOURCE_MAX = 16 << 20  # a generated kernel source or header (a 16-lane kernel is ~100 KB)
LIBRARY_MAX = 256 << 20  # a compiled C simulation library (~1 MB)
ELF_MAGIC = b"\x7fELF"


class CsimError(OptimusError):
    """The generated kernel did not compile, or the library misbehaved."""


def compiler() -> str:
    cxx = os.environ.get("CXX") or "g++"
    path = shutil.which(cxx)
    if not path:
        raise ToolMissing(f"C++ compiler {cxx!r} not found; install g++ (apt-get install g++) or set CXX")
    return path


def project_dir_checked(project_dir: Path) -> Path:
    """`project_dir` as a Path, refused unless it is a folder (before its manifest is read)."""
    project_dir = Path(project_dir)
    if not project_dir.is_dir():
        raise UserError(f"{project_dir}: no such directory; generate a project first (optimusnic generate -o DIR)")
    return project_dir


def kernel_source(project_dir: Path, spec: KernelSpec) -> Path:
    """The project's generated HLS kernel source, which must be there."""
    source = Path(project_dir) / "hls" / f"{spec.name}.cpp"
    if not source.is_file():
        raise UserError(f"{source}: kernel source missing; regenerate the project (optimusnic generate)")
    return source


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
        return proc.run([cxx, "--version"], f"C++ compiler {cxx} --version", timeout=proc.VERSION_TIMEOUT_S,
                        capture_output=True, text=True).stdout
    except OSError as exc:
        raise ToolMissing(f"cannot run {cxx}: {exc}") from exc


def _first_errors(stderr: str, lines: int = 25) -> str:
    picked = [ln for ln in stderr.splitlines() if ln.strip()][:lines]
    return "\n".join(picked)


def amd_headers_dir() -> Path:
    """AMD's C simulation headers (ap_int.h, hls_stream.h) inside the installed hls4ml wheel.

    Found without importing hls4ml (it is installed without its dependencies, see the Makefile).
    """
    hint = (f"install AMD's C simulation headers with `pip install --no-deps {HLS4ML_REQUIREMENT}` "
            "(make deps does), or use our stand-ins (--headers own)")
    try:
        found = importlib.util.find_spec("hls4ml")
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        raise ToolMissing(f"AMD's HLS headers not found (no hls4ml package): {hint}")
    for root in found.submodule_search_locations:
        folder = Path(root) / "templates" / "vivado" / "ap_types"
        if all((folder / h).is_file() for h in AMD_HEADERS):
            return folder
    raise ToolMissing(f"AMD's HLS headers not found in the hls4ml package at {found.submodule_search_locations[0]} "
                      f"(templates/vivado/ap_types/ lacks {', '.join(AMD_HEADERS)}): {hint}")


def include_flags(headers: str) -> list[str]:
    """Include path of a header set: harness, our stand-ins for unpublished AMD headers, then
    AMD's ap_int.h/hls_stream.h as system headers ("amd") or our stand-ins for them ("own")."""
    if headers not in HEADER_SETS:
        raise UserError(f"headers: {headers!r}; choose one of {', '.join(HEADER_SETS)}")
    flags = ["-I", str(HARNESS_DIR), "-I", str(HLS_INCLUDE_DIR)]
    if headers == "amd":
        # GCC reports -W(maybe-)uninitialized where system-header code is inlined into ours, not in
        # the header: ap_private's default constructor leaves its words uninitialized, by AMD's
        # design. Our code keeps those checks in the "own" build, which the tests compile too.
        return [*flags, "-isystem", str(amd_headers_dir()), "-Wno-uninitialized", "-Wno-maybe-uninitialized"]
    return [*flags, "-I", str(OWN_HEADERS_DIR)]


def _header_files(headers: str) -> list[Path]:
    dirs = [HARNESS_DIR, HLS_INCLUDE_DIR, amd_headers_dir() if headers == "amd" else OWN_HEADERS_DIR]
    files = [f for d in dirs[:2] for f in sorted(d.glob("*.h"))] + [HARNESS_DIR / "exports.map"]
    return files + sorted(dirs[2].rglob("*.h"))


def verified_sources(project_dir: Path, manifest: dict, spec: KernelSpec) -> dict[str, bytes]:
    """The kernel's C++ files (`hls/<name>.cpp` and the headers the manifest lists beside it), each
    read once and checked against the sha256 the (verified) manifest records: the bytes to compile.

    Nothing else of the project's `hls/` folder is compiled: a header added there (say a planted
    `hls_math.h`) would otherwise be found before the toolkit's, the kernel including its headers
    in quotes."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise UserError(f"{project_dir}: manifest lists no files; regenerate the project (optimusnic generate)")
    main = f"hls/{spec.name}.cpp"
    if main not in files:
        raise UserError(f"{project_dir}: the manifest does not list {main}; regenerate the project "
                        "(optimusnic generate)")
    picked = sorted(rel for rel in files if rel.startswith("hls/") and rel.count("/") == 1
                    and (rel == main or rel.endswith(".h")))
    out: dict[str, bytes] = {}
    for rel in picked:
        path = safe_io.inside(project_dir, rel, "kernel source")
        try:
            data = safe_io.read_bytes(path, KERNEL_SOURCE_MAX, "kernel source")
        except safe_io.FileRefused as exc:
            raise UserError(f"{exc}; regenerate the project (optimusnic generate)") from exc
        if hashlib.sha256(data).hexdigest() != files[rel]:
            raise UserError(f"{path}: differs from the sha256 the manifest records (changed since the project "
                            "was verified?); regenerate the project (optimusnic generate)")
        out[rel.split("/", 1)[1]] = data
    return out


def _library_ok(lib: Path) -> bool:
    """A cached library is loaded only if it is a shared object whose sha256 is the one recorded
    beside it when it was built (an empty, truncated or replaced file is rebuilt)."""
    try:
        stamp = lib.with_name(lib.name + ".sha256").read_text().strip()
        data = safe_io.read_bytes(lib, LIBRARY_MAX, "cached C simulation library")
    except (OSError, UserError):
        return False
    return data[:4] == ELF_MAGIC and hashlib.sha256(data).hexdigest() == stamp


def compile_kernel(project_dir: Path, build_dir: Path | None = None, headers: str = "amd",
                   spec: KernelSpec | None = None, manifest: dict | None = None) -> Path:
    """Compile the project's kernel into the C simulation library; returns the .so path (cached).

    `manifest`: the project's manifest when the caller has loaded (and verified) it already (else it
    is loaded and verified here). Only the manifest-listed kernel files are compiled, from bytes read
    once and checked against their recorded sha256, copied into a private folder (no other file of
    the project can be included); the cache key covers every byte compiled; a cached library is
    used only if it matches the sha256 recorded beside it."""
    project_dir = project_dir_checked(project_dir)
    if manifest is None:
        manifest = load_manifest(project_dir)
    if spec is None:
        spec = spec_from_manifest(manifest)
    kernel_source(project_dir, spec)
    sources = verified_sources(project_dir, manifest, spec)
    includes = include_flags(headers)
    build_dir = Path(build_dir) if build_dir else BUILD_DIR / "csim"
    build_dir.mkdir(parents=True, exist_ok=True)
    cxx = compiler()
    unit = f'#include "{spec.name}.cpp"\n#include "{HOST_HEADER}"\nOPTIMUSNIC_CSIM_ENTRY({spec.name})\n'
    digest = hashlib.sha256()
    for part in (unit, _tool_version(cxx), _cpu_id(), str(BASE_FLAGS), str(NATIVE_FLAGS), str(includes),
                 str(LINK_FLAGS)):
        digest.update(hashlib.sha256(part.encode()).digest())
    for name, data in sorted(sources.items()):
        digest.update(hashlib.sha256(name.encode()).digest() + hashlib.sha256(data).digest())
    for header in _header_files(headers):
        digest.update(hashlib.sha256(header.name.encode()).digest() + hashlib.sha256(header.read_bytes()).digest())
    key = digest.hexdigest()[:16]
    lib = build_dir / f"lib{spec.name}_csim_{headers}_{key}.so"
    if _library_ok(lib):
        return lib
    # The verified bytes in a private folder of their own (mode 0700): the compiler reads these, not
    # the project's files, so nothing swapped in after the check is compiled.
    private = Path(tempfile.mkdtemp(prefix=f"{spec.name}_csim_src.", dir=build_dir))
    fd, tmp = tempfile.mkstemp(prefix=lib.stem + ".", suffix=".tmp.so", dir=build_dir)
    os.close(fd)
    try:
        for name, data in sources.items():
            (private / name).write_bytes(data)
        src = private / "unit.cpp"
        src.write_text(unit)
        for extra in (NATIVE_FLAGS, ()):
            cmd = [cxx, *BASE_FLAGS, *extra, *includes, *LINK_FLAGS, "-o", tmp, str(src)]
            result = proc.run(cmd, f"C++ compiler {cxx}", capture_output=True, text=True)
            if result.returncode == 0:
                break
            if not extra or "march" not in result.stderr:  # only -march=native earns a second try
                raise CsimError(f"g++ failed to compile {project_dir / 'hls' / (spec.name + '.cpp')} ({headers} "
                                f"HLS headers):\n{_first_errors(result.stderr)}")
        built = Path(tmp).read_bytes()
        if built[:4] != ELF_MAGIC:
            raise CsimError(f"C++ compiler {cxx} exited 0 but wrote no shared library "
                            f"({len(built)} bytes at {tmp}); nothing was cached")
        safe_io.atomic_write(lib.with_name(lib.name + ".sha256"), hashlib.sha256(built).hexdigest() + "\n")
        os.replace(tmp, lib)  # a new file: never written through a link planted at the cached name
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        shutil.rmtree(private, ignore_errors=True)
    return lib


def load_library(lib: Path) -> ctypes.CDLL:
    """Load a cached library from the bytes that were checked: read once, compared with the sha256
    recorded beside it, written to a private file of this process (mode 0600) and loaded from there
    (a library replaced between the check and the load is never loaded)."""
    lib = Path(lib)
    try:
        stamp = lib.with_name(lib.name + ".sha256").read_text().strip()
        data = safe_io.read_bytes(lib, LIBRARY_MAX, "cached C simulation library")
    except (OSError, UserError) as exc:
        raise CsimError(f"{lib}: cannot read the cached library ({exc}); delete build/csim and retry") from exc
    if data[:4] != ELF_MAGIC or hashlib.sha256(data).hexdigest() != stamp:
        raise CsimError(f"{lib}: not the library that was built (its sha256 differs from {lib.name}.sha256); "
                        "delete build/csim and retry")
    fd, private = tempfile.mkstemp(prefix=lib.stem + ".", suffix=".loaded.so", dir=lib.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(private)
    finally:
        os.unlink(private)  # the mapping stays; the name goes
