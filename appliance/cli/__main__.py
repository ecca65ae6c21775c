"""``python -m appliance.cli``: the ``appliance`` command."""

import sys

from appliance.cli import main

sys.exit(main())
