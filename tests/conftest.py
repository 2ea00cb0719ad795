"""Shared pytest options: `--full` runs the long simulation sweeps (`make test-full`)."""

from __future__ import annotations

import pytest

from hls.rtl import simulators


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="run the full simulation sweeps (200k vectors per FP unit, every kernel variant)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long simulation, runs only with --full")
    config.addinivalue_line("markers", "icarus: needs Debian's iverilog (make deps-icarus)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = config.getoption("--full")
    skip_slow = pytest.mark.skip(reason="long sweep: run with `make test-full` (pytest --full)")
    skip_icarus = pytest.mark.skip(reason="Icarus not installed: `make deps-icarus`")
    have_icarus = simulators.available("icarus")
    for item in items:
        if "slow" in item.keywords and not full:
            item.add_marker(skip_slow)
        if "icarus" in item.keywords and not have_icarus:
            item.add_marker(skip_icarus)


@pytest.fixture(scope="session")
def full_run(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--full"))
