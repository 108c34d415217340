"""``python -m kitm.search`` (console script ``kitm-search``): see :mod:`kitm.search.cli`."""

import sys

from kitm.search.cli import main

if __name__ == "__main__":
    sys.exit(main())
