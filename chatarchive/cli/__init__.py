"""The ``chatarchive`` command: it parses arguments and calls ``ChatArchive``.

Each module holds a group of commands: ``db`` (migrations and switches),
``transfer`` (import and export), ``browse`` (ls, show, rm, stats, search),
``prices`` (models' prices for ``stats --cost``), ``serving`` (the MCP
server), ``bench`` and ``quickstart``; ``rendering`` and ``transcript`` are
how they show what they found.
"""

from . import bench, browse, db, prices, quickstart, serving, transfer
from .app import main

__all__ = ["bench", "browse", "db", "main", "prices", "quickstart", "serving", "transfer"]
