"""``python -m rlvr.cli ...`` (and ``torchrun ... -m rlvr.cli train ...``): the ``rlvr`` command."""

import sys

from rlvr.cli import main

if __name__ == "__main__":
    sys.exit(main())
