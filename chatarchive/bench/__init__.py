"""``chatarchive bench``: chatarchive's speed, measured against the database's own limits.

Like ``pgbench`` for this schema: a deterministic synthetic workload
(``.workload``) is loaded and read in one run, and every figure is reported
next to a reference measured in that same run (raw ``COPY`` of the same rows,
JSONB-blob designs, hand-written queries), so that the ratios, not the
machine, are what is compared (``.runner``).
"""

from .runner import BenchReport, run_bench
from .workload import generate_chats

__all__ = ["BenchReport", "generate_chats", "run_bench"]
