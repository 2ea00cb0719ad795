"""`python -m optimusnic ...`: the `optimusnic` command."""

import sys

from optimusnic.cli import main

sys.exit(main())
