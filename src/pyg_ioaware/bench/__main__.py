"""``python -m pyg_ioaware.bench``: see :mod:`pyg_ioaware.bench.cli`."""
import sys

from .cli import main

sys.exit(main())
