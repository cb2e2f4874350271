"""``python -m search.cli``: the ``dynosim`` command line."""

import sys

from search.cli.main import main

sys.exit(main())
