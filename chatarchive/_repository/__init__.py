"""The archive's operations on chats, each a function of a unit of work.

- ``.unit``: the unit of work an operation runs in (executor, backend, user, limits);
- ``.plans``: the instructions of operations of several steps, carried out by each face;
- ``.writes``: save, append, feedback, update, truncate, delete;
- ``.streaming``: a message stored a chunk at a time;
- ``.reads``: documents, listings, counts, search, export;
- ``.bulk`` and ``.batches``: ``save_many``, prepared in a thread, and the bulk-load mode.
"""

__all__: list[str] = []
