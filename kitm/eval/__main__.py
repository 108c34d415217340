"""``python -m kitm.eval`` (console script ``kitm-eval``): see :mod:`kitm.eval.cli`."""

import sys

from kitm.eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
