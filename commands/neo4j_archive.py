"""neo4j_archive: the JVM's class-data-sharing archive of the Neo4j jars (`make neo4j` runs it
after the jars; not a DVC stage: nothing a run records depends on it).

One local server is started and stopped with `-XX:ArchiveClassesAtExit`; every later start of a
local server reads the archive (`-XX:SharedArchiveFile`), which took its start from 5.2 s to 3.4 s
on the 2-core machine (measurements/neo4j_archive.json). Runs nothing when the archive of these
jars and this java exists.

    python -m commands.neo4j_archive
"""

from __future__ import annotations

import time

from clients.graph.server import write_class_archive
from stages.common import read_params, run_stage


def main() -> None:
    started = time.monotonic()
    archive = write_class_archive(read_params().graph.model_copy(update={"backend": "local"}))
    print(f"neo4j class archive: {archive} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    run_stage(main)
