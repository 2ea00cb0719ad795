"""`python -m optimusnic.cli ...`: the `optimusnic` command."""

import sys

from optimusnic.cli import main

sys.exit(main())
