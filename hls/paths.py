"""Where the toolkit's non-Python parts live: templates, RTL, testbenches, the bitstream registry.

The toolkit runs from a checkout (editable install), so these are found next to the package.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = REPO_ROOT / "templates"
SIM_DIR = REPO_ROOT / "sim"
RTL_DIR = SIM_DIR / "rtl"
TB_DIR = SIM_DIR / "tb"
# Reusable bench models (host, card memory, AXI monitor), apart from the cocotb tests that use them.
TB_MODELS_DIR = TB_DIR / "models"
BITSTREAMS_DIR = REPO_ROOT / "bitstreams"
HLS_INCLUDE_DIR = Path(__file__).resolve().parent / "csim" / "include"
BUILD_DIR = REPO_ROOT / "build"
