"""The HNSW index of an archive's vectors holds them in half precision.

On PostgreSQL with pgvector, the index that ``configure_search`` builds over
the archive embedder's vectors (``ix_embeddings_vectors_*``) casts each
``real[]`` to ``halfvec`` (half precision): half the memory a search goes
through, and up to 4,000 dimensions instead of 2,000. The stored vectors
stay 32-bit; a search ranks the index's candidates by their exact cosine
distance. The upgrade builds the index again, which reads every vector (on a
large archive, minutes: run it when searches by meaning can wait).

The downgrade builds it again over ``vector`` (or drops it, for vectors of
more than 2,000 numbers, which that index cannot hold). SQLite has no such
index: nothing changes there.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-09
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The vector indexes, as ``configure_search`` names them.
INDEXES = "SELECT indexname, indexdef FROM pg_indexes WHERE starts_with(indexname, 'ix_embeddings_vectors_')"


def _rebuild(source: str, target: str, *, most: int | None = None) -> str:
    """A block that drops each vector index and creates it again over the
    ``target`` type instead of ``source`` (``most``: not for vectors of more
    dimensions than that, which the index over ``target`` cannot hold)."""
    too_wide = (
        ""
        if most is None
        else f"IF substring(found.indexdef FROM '::{source}\\((\\d+)\\)')::integer > {most} THEN CONTINUE; END IF; "
    )
    rebuilt = (
        f"replace(replace(found.indexdef, '::{source}(', '::{target}('), "
        f"'{source}_cosine_ops', '{target}_cosine_ops')"
    )
    return (
        "DO $$ DECLARE found record; BEGIN "
        f"FOR found IN {INDEXES} LOOP "
        "EXECUTE format('DROP INDEX %I', found.indexname); "
        f"{too_wide}EXECUTE {rebuilt}; "
        "END LOOP; END $$"
    )


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(_rebuild("vector", "halfvec"))


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(_rebuild("halfvec", "vector", most=2000))
