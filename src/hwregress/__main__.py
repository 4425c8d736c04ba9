"""``python -m hwregress``: see :mod:`hwregress.cli`."""

import sys

from hwregress.cli import main

sys.exit(main())
