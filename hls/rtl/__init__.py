"""RTL stage: simulators, the cocotb bench runner, yosys synthesis and netlist analysis."""
