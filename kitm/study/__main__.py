"""``python -m kitm.study --spec=<file.toml>``: see :mod:`kitm.study.cli`."""

import sys

from kitm.study.cli import main

if __name__ == "__main__":
    sys.exit(main())
