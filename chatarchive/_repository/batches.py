"""Documents prepared for ``save_many`` in a thread, a few batches ahead of the writes.

Preparing a batch (pydantic validation, conversion to rows) takes Python's
time; writing it mostly waits for the server, with the GIL released. So batch
N+1 is prepared while batch N is written, in memory that does not grow with
the input: at most ``AHEAD`` batches wait for the writer.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from queue import Empty, Full, Queue
from typing import Any

from chatarchive._arguments import require_at_least_one, require_flag, require_many
from chatarchive._document import ChatDocument, Limits
from chatarchive._exceptions import InvalidArgument, InvalidDocument
from chatarchive._rows import ChatRows, document_to_rows
from chatarchive.redaction import Redactor, redact_document

__all__ = [
    "AHEAD",
    "BATCH_BYTES",
    "INPUT_WAIT",
    "MAX_BATCH_SIZE",
    "PREPARING_THREAD",
    "Batches",
    "PreparedBatch",
    "check_save_many",
    "documents_in_flight",
    "prepared_batches",
    "split_by_chat",
]


@dataclass
class PreparedBatch:
    """Up to ``batch_size`` input items (and about ``BATCH_BYTES`` of text):
    the valid documents' rows by chat id (with their index in the input; a
    later copy of a chat replaces an earlier one), and the invalid items'
    errors."""

    documents: dict[str, tuple[int, ChatRows]] = field(default_factory=dict)
    errors: list[tuple[int, InvalidDocument]] = field(default_factory=list)
    size: int = 0
    bytes: int = 0

    def report_errors(self, on_error: Callable[[int, InvalidDocument], None] | None) -> None:
        """Tell ``on_error`` about each invalid item; without it, raise the first."""
        for index, error in self.errors:
            if on_error is None:
                raise error
            on_error(index, error)


#: The most documents save_many writes in one batch. More gives no speed (a
#: batch of 250 is already ~5,000 rows per COPY) and only holds more memory;
#: it would also overflow PostgreSQL's 65,535 parameters of one statement.
MAX_BATCH_SIZE = 10_000

#: Batches prepared ahead of the writer: enough to keep it busy, few enough to
#: keep memory bounded.
AHEAD = 2

#: The most text one batch holds: the UTF-8 bytes of its documents' strings
#: (``ChatDocument.approximate_size``). A batch ends at ``batch_size``
#: documents or at this size, whichever comes first, so that the memory of an
#: import is bounded by bytes, not by chats: a batch of long conversations is
#: a few chats, a batch of short ones ``batch_size``. At this size a batch is
#: still thousands of rows, as fast to write as a larger one.
BATCH_BYTES = 2 * 2**20


#: The name of the thread that reads and prepares the next batches.
PREPARING_THREAD = "chatarchive-prepare"


def check_save_many(
    docs: object, batch_size: object, *, bulk: object, on_error: object, writers: object = 1
) -> None:
    """The arguments of save_many, checked before anything is read: ``docs``
    an iterable of documents (not one document), ``batch_size`` from 1 to
    ``MAX_BATCH_SIZE``, ``bulk`` a bool, ``on_error`` None or a callable,
    ``writers`` at least one (one for a bulk load)."""
    require_many(docs, "docs", "chat documents (save takes one)")
    require_flag(bulk, "bulk")
    require_at_least_one(batch_size, "batch_size")  # type: ignore[arg-type]
    if batch_size > MAX_BATCH_SIZE:  # type: ignore[operator]
        raise InvalidArgument(f"batch_size must be at most {MAX_BATCH_SIZE:,}", argument="batch_size")
    if on_error is not None and not callable(on_error):
        raise InvalidArgument(
            f"on_error must be callable, not {type(on_error).__name__}", argument="on_error"
        )
    require_at_least_one(writers, "writers")  # type: ignore[arg-type]
    if bulk and writers != 1:
        raise InvalidArgument("a bulk load is one transaction: it has one writer", argument="writers")


def documents_in_flight(batch_size: int) -> int:
    """At most how many documents save_many has read but not yet written or
    reported: the batches prepared ahead, the one being prepared and the one
    being written."""
    return batch_size * (AHEAD + 2)


def split_by_chat(batch: PreparedBatch, parts: int) -> list[PreparedBatch]:
    """The batch's documents in ``parts`` batches, each chat always in the same
    part (by a hash of its id), so that parallel writers never touch the same
    chat and the later copy of a chat is written after the earlier one."""
    split = [PreparedBatch() for _ in range(parts)]
    for chat_id, item in batch.documents.items():
        part = split[zlib.crc32(chat_id.encode("utf-8", "surrogatepass")) % parts]
        part.documents[chat_id] = item
        part.size += 1
    return split


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()

#: What ``prepared_batches`` returns.
Batches = Generator[PreparedBatch, None, None]

#: How long, at most, a save_many that stops early (an error, Ctrl-C) waits
#: for its reading thread to get the input's next item before it gives up on
#: it (seconds).
INPUT_WAIT = 0.5


def prepared_batches(
    docs: Iterable[ChatDocument | Mapping[str, Any]],
    batch_size: int,
    *,
    stop_at_error: bool,
    limits: Limits | None = None,
    redactor: Redactor | None = None,
    abandoned: threading.Event | None = None,
) -> Batches:
    """Batches of validated documents and their rows, prepared in a background
    thread that reads ``docs`` at most ``AHEAD`` batches ahead of the
    consumer. Setting ``abandoned`` (from any thread) ends the batches early,
    without waiting for the next one."""
    queue: Queue[object] = Queue(maxsize=AHEAD)
    stop = threading.Event()
    reading = threading.Event()  # set while the producer waits on the caller's input

    def read() -> Iterator[ChatDocument | Mapping[str, Any]]:
        iterator = iter(docs)
        while True:
            reading.set()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                reading.clear()
            yield item
            del item  # not held while the next one is read

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.05)
            except Full:
                continue
            return True
        return False

    def produce() -> None:
        try:
            batch = PreparedBatch()
            now = datetime.now(UTC)
            for index, item in enumerate(read()):
                if stop.is_set():
                    return
                batch.size += 1
                try:
                    doc = redact_document(redactor, ChatDocument.parse(item, limits=limits))
                except InvalidDocument as exc:
                    batch.errors.append((index, exc))
                    if stop_at_error:
                        break
                    continue
                batch.documents[doc.chat_id] = (index, document_to_rows(doc, now=now, version=1))
                batch.bytes += doc.approximate_size()
                del doc, item  # only the rows are kept: the document's objects go now
                if index % 4 == 0:
                    # Hand the GIL back: the writer needs it only briefly, but
                    # promptly, between its waits for the server.
                    time.sleep(0)
                if batch.size >= batch_size or batch.bytes >= BATCH_BYTES:
                    if not put(batch):
                        return
                    batch = PreparedBatch()
                    now = datetime.now(UTC)
            if batch.size:
                put(batch)
        except BaseException as exc:  # handed over to the consumer and raised there
            put(_Failure(exc))
        finally:
            put(_DONE)

    worker = threading.Thread(target=produce, name=PREPARING_THREAD, daemon=True)
    worker.start()
    try:
        yield from _consume(queue, abandoned or threading.Event())
    finally:  # done, failed, interrupted (Ctrl-C) or closed early
        stop.set()
        _let_end(worker, queue, reading)


def _let_end(worker: threading.Thread, queue: Queue[object], reading: threading.Event) -> None:
    """Wait for the stopped producer to end: unblock it while it waits on a full
    queue, and let it finish the item it prepares; but wait only ``INPUT_WAIT``
    for the caller's input, which may have nothing more for now (an open pipe,
    ``tail -f``): the producer then ends at the input's next item, on its own."""
    input_wait = INPUT_WAIT
    while worker.is_alive():
        if reading.is_set():
            if input_wait <= 0:
                return
            time.sleep(0.01)
            input_wait -= 0.01
            continue
        with suppress(Empty):
            queue.get(timeout=0.01)
    worker.join()


def _consume(queue: Queue[object], abandoned: threading.Event) -> Iterator[PreparedBatch]:
    while not abandoned.is_set():
        try:
            item = queue.get(timeout=0.05)
        except Empty:
            continue
        if item is _DONE:
            return
        if isinstance(item, _Failure):
            raise item.error
        assert isinstance(item, PreparedBatch)
        yield item
