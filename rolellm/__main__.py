"""`python -m rolellm`: the `rolellm` command."""

import sys

from rolellm.scripts.cli import main


sys.exit(main())
