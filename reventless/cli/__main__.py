"""``python -m reventless.cli``: the ``reventless`` command."""

import sys

from . import main

sys.exit(main())
