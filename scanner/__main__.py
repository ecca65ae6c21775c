"""``python -m scanner``: see ``scanner.cli``."""

from scanner.cli import main

raise SystemExit(main())
