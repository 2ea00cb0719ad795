"""RTL stage: simulators, the cocotb bench runner, yosys synthesis, netlist analysis and the timing report."""
