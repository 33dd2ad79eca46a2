"""The archive's operations on chats, each a function of a unit of work.

- :mod:`.unit`: the unit of work an operation runs in (executor, backend, user, limits);
- :mod:`.plans`: the instructions of operations of several steps, carried out by each face;
- :mod:`.writes`: save, append, feedback, update, truncate, delete;
- :mod:`.streaming`: a message stored a chunk at a time;
- :mod:`.reads`: documents, listings, counts, search, export;
- :mod:`.bulk` and :mod:`.batches`: ``save_many``, prepared in a thread, and the bulk-load mode.
"""

__all__: list[str] = []
