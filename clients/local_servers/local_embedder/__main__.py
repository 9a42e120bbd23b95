"""`python -m clients.local_servers.local_embedder build | serve` (see
clients/local_servers/local_embedder/cli.py)."""

import sys

from clients.local_servers.local_embedder.cli import main

sys.exit(main())
