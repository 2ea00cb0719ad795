"""The port-name grammar (hls.ports): generator, inverse and the manifest schema agree."""

from __future__ import annotations

import re

import pytest

from hls.ports import ARRAYS, PORT_PATTERN, is_read_port, is_written_port, parse_port, port_array, port_names
from hls.sizing import StripeCounts


def test_every_port_parses_back_to_its_stripe() -> None:
    counts = StripeCounts(grad=3, state=4, out=2)
    for array, index in counts.stripes():
        for port in port_names(array, index):
            assert re.fullmatch(PORT_PATTERN, port)
            assert port_array(port) == (array, index)
            assert is_read_port(port) != is_written_port(port)
    assert [a for a in ARRAYS if counts.of(a)] == list(ARRAYS)
    assert parse_port("v12_wr") == ("v", 12, "wr") and is_written_port("out0") and is_read_port("grad1")


@pytest.mark.parametrize("bad", ["p1", "grad0_rd", "out0_wr", "x0", "p_rd", "m1_rw", ""])
def test_names_outside_the_grammar_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a kernel port name"):
        parse_port(bad)
