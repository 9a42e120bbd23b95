"""`python -m clients.local_servers.local_model build | serve` (see
clients/local_servers/local_model/cli.py)."""

import sys

from clients.local_servers.local_model.cli import main

sys.exit(main())
