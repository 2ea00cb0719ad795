"""The xclbin (AXLF) container format, as XRT's xclbin.h lays it out: one owner for every reader.

An xclbin is a file header (magic "xclbin2\\0", a signature, a key block, a unique id, then the
`axlf_header`), a table of section headers and the section payloads. The registry checks
containers with `is_axlf` / `section_kinds` and builds a metadata-only one (`container`); the
data-file checks (hls.validate) and the driver's Alveo backend read the section table with
`xclbin_sections`, every count and offset bounded by the file size.
"""

from __future__ import annotations

import struct
from pathlib import Path

from hls import safe_io
from hls.errors import Invalid, UserError

XCLBIN_MAGIC = b"xclbin2\0"
FILE_HEAD_SIZE = 8 + 32 + 256 + 8  # magic, signature, key block, unique id
# axlf_header: length, timestamp, feature ROM timestamp, version patch/major/minor, mode, feature ROM
# UUID, platform VBNV, UUID, debug bin, section count (and padding).
AXLF_HEADER = struct.Struct("<QQQHBBI16s64s16s16sI4x")
AXLF_HEADER_SIZE = FILE_HEAD_SIZE + AXLF_HEADER.size  # 456: where the section table starts
AXLF_SECTION_HEADER = struct.Struct("<I16s4xQQ")  # kind, name, (pad), offset, size
MAX_SECTIONS = 256  # xclbin.h knows ~40 section kinds; real files carry 10-20 sections
SECTION_TABLE_MAX = AXLF_HEADER_SIZE + MAX_SECTIONS * AXLF_SECTION_HEADER.size

# Section kinds (xclbin.h `axlf_section_kind`) the toolkit and the driver read or write.
BITSTREAM = 0
EMBEDDED_METADATA = 2
MEM_TOPOLOGY = 6
CONNECTIVITY = 7
IP_LAYOUT = 8
PDI = 18
BITSTREAM_PARTIAL_PDI = 19
GROUP_TOPOLOGY = 26
GROUP_CONNECTIVITY = 27
# The kinds that carry a device image: a container with none of them programs nothing.
IMAGE_SECTIONS = {BITSTREAM: "BITSTREAM", PDI: "PDI", BITSTREAM_PARTIAL_PDI: "BITSTREAM_PARTIAL_PDI"}


def _fail(file: str, field: str, message: str) -> Invalid:
    return Invalid(f"{file}: {field}: {message}")


def xclbin_sections(head: bytes, file_size: int, file: str) -> list[tuple[int, int, int]]:
    """(kind, offset, size) of each section, from the first bytes of an xclbin (`head`: at least the
    header and the section table), every count and offset bounded by the file size. Raises Invalid."""
    if not head.startswith(XCLBIN_MAGIC):
        raise _fail(file, "magic", "not an xclbin (AXLF) container: the file does not start with 'xclbin2'")
    if file_size < AXLF_HEADER_SIZE or len(head) < AXLF_HEADER_SIZE:
        raise _fail(file, "header", f"{file_size} bytes, shorter than the {AXLF_HEADER_SIZE}-byte AXLF header")
    (length,) = struct.unpack_from("<Q", head, FILE_HEAD_SIZE)
    if length > file_size:
        raise _fail(file, "m_length", f"says {length:,} bytes, the file has {file_size:,}")
    (count,) = struct.unpack_from("<I", head, AXLF_HEADER_SIZE - 8)
    room = (file_size - AXLF_HEADER_SIZE) // AXLF_SECTION_HEADER.size
    if count > min(room, MAX_SECTIONS):
        raise _fail(file, "m_numSections",
                    f"{count:,} sections; the file has room for {room:,} section headers (at most {MAX_SECTIONS})")
    need = AXLF_HEADER_SIZE + count * AXLF_SECTION_HEADER.size
    if len(head) < need:
        raise _fail(file, "sections", "section table truncated")
    out = []
    for i in range(count):
        at = AXLF_HEADER_SIZE + i * AXLF_SECTION_HEADER.size
        kind, _name, offset, size = AXLF_SECTION_HEADER.unpack_from(head, at)
        if offset > file_size or size > file_size - offset:
            raise _fail(file, f"section[{i}]",
                        f"kind {kind} at offset {offset:,} with {size:,} bytes runs past the end of the file "
                        f"({file_size:,})")
        out.append((kind, offset, size))
    return out


def is_axlf(path: Path) -> bool:
    """Whether the file starts with the AXLF magic (a stand-in or a truncated copy does not)."""
    with safe_io.open_regular(path, safe_io.XCLBIN_MAX, "xclbin") as (f, _size):
        return f.read(len(XCLBIN_MAGIC)) == XCLBIN_MAGIC


def section_kinds(path: Path) -> list[int]:
    """The section kinds listed in an AXLF file's header (empty when it is not one). Counts and
    offsets are bounded by the file size: a header claiming 0xFFFFFFFF sections is refused at once
    instead of walked; only the header and section table are read."""
    with safe_io.open_regular(path, safe_io.XCLBIN_MAX, "xclbin") as (f, size):
        head = f.read(SECTION_TABLE_MAX)
    if not head.startswith(XCLBIN_MAGIC):
        return []
    try:
        return [kind for kind, _off, _len in xclbin_sections(head, size, str(path))]
    except Invalid as exc:
        raise UserError(f"malformed xclbin: {exc}") from exc


def container(sections: list[tuple[int, str, bytes]], vbnv: bytes, uuid: bytes) -> bytes:
    """An AXLF file of `sections` (kind, name, payload), payloads 8-byte aligned after the table."""
    base = AXLF_HEADER_SIZE + AXLF_SECTION_HEADER.size * len(sections)
    headers, payload = b"", b""
    for kind, title, data in sections:
        payload += bytes(-(base + len(payload)) % 8)  # 8-byte aligned payloads
        headers += AXLF_SECTION_HEADER.pack(kind, title.encode()[:16], base + len(payload), len(data))
        payload += data
    total = AXLF_HEADER_SIZE + len(headers) + len(payload)
    header = AXLF_HEADER.pack(total, 0, 0, 0, 2, 2, 1, b"", vbnv[:64], uuid, b"", len(sections))
    file_head = XCLBIN_MAGIC + bytes(32) + bytes(256) + struct.pack("<Q", 0)
    return file_head + header + headers + payload


__all__ = ["AXLF_HEADER", "AXLF_HEADER_SIZE", "AXLF_SECTION_HEADER", "BITSTREAM", "BITSTREAM_PARTIAL_PDI",
           "CONNECTIVITY", "EMBEDDED_METADATA", "GROUP_CONNECTIVITY", "GROUP_TOPOLOGY", "IMAGE_SECTIONS", "IP_LAYOUT",
           "MAX_SECTIONS", "MEM_TOPOLOGY", "PDI", "SECTION_TABLE_MAX", "XCLBIN_MAGIC", "container", "is_axlf",
           "section_kinds", "xclbin_sections"]
