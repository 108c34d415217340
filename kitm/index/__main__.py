"""``python -m kitm.index`` (console script ``kitm-index``): see :mod:`kitm.index.cli`."""

import sys

from kitm.index.cli import main

if __name__ == "__main__":
    sys.exit(main())
