"""``python -m hwregress``: see :mod:`hwregress.cli`; ``python -m hwregress check``: :mod:`hwregress.check.command`
(apart, as the checks measure with torch and the other commands never import it)."""

import sys

if sys.argv[1:2] == ["check"]:
    from hwregress.check.command import main as check

    sys.exit(check(sys.argv[2:]))

from hwregress.cli import main

sys.exit(main())
