"""`python -m eagle3lib COMMAND ...`: the `eagle3lib` console script without installing it; see eagle3lib.cli."""
from .cli import main

raise SystemExit(main())
