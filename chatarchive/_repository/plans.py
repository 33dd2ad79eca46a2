"""Plans: operations of several steps, written once for every face that runs them.

Most operations are one call in one unit of work (see ``.unit``). A few
take several: ``save_many`` writes batch after batch, ``export`` reads page
after page, ``delete_older_than`` deletes a batch at a time. Each of these is a
generator (a *plan*) that yields instructions and is sent their results; it
does no I/O of its own. The face running it carries each instruction out its
own way: in a transaction of its own or in the caller's, awaited or not, in
threads or in tasks. So the logic of every operation exists once, whether it
is called through ``ChatArchive``, ``ChatRepository`` or their asyncio twins.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from sqlalchemy import URL, Connection

from chatarchive._backends import Backend
from chatarchive._document import ChatDocument, Limits
from chatarchive.redaction import Redactor

if TYPE_CHECKING:
    from .appends import Guesses
    from .unit import Unit

__all__ = [
    "Connected",
    "Docs",
    "Emit",
    "FaceFacts",
    "InTransaction",
    "Instruction",
    "Kind",
    "NextBatch",
    "Plan",
    "PlanRun",
    "Prepare",
    "Step",
    "Stream",
    "Together",
    "primed",
]

R = TypeVar("R")
T = TypeVar("T")

#: What a ``save_many`` reads: documents (or their canonical JSON), from an
#: iterable, or on the asyncio faces an async iterable.
Docs = Iterable[ChatDocument | Mapping[str, Any]] | AsyncIterable[ChatDocument | Mapping[str, Any]]


class Kind(enum.Enum):
    """What a step does to the archive, which decides where a face runs it."""

    READ = "read"
    WRITE = "write"
    #: A write of one statement, atomic on its own: a face that commits each
    #: step runs it without a transaction around it (one round trip).
    STATEMENT = "statement"


@dataclass(frozen=True)
class FaceFacts:
    """What a plan may know of the face that runs it."""

    backend: Backend
    user_id: str | None
    limits: Limits | None
    #: Each step commits on its own (an archive), rather than in the caller's
    #: transaction (a repository).
    commits_each_step: bool
    #: The archive's database (archives only).
    url: URL | None = None
    #: What the archive last saw of its database (archives only).
    guesses: Guesses | None = None
    #: What replaces text before it is stored.
    redactor: Redactor | None = None


@dataclass(frozen=True)
class Step(Generic[R]):
    """Run ``call`` in a unit of work; the plan is sent what it returns."""

    kind: Kind
    call: Callable[[Unit], R]


@dataclass(frozen=True)
class Together(Generic[R]):
    """Run the steps at once, each in a unit of its own (parallel writers);
    the plan is sent their results in order. The first error is raised once
    all have ended."""

    steps: Sequence[Step[R]]


@dataclass(frozen=True)
class InTransaction(Generic[R]):
    """Run the plan ``start(facts)`` makes in one transaction: a face that
    commits each step opens one and runs it through that transaction's
    repository; a repository runs it as it is."""

    start: Callable[[FaceFacts], Plan[R]]


@dataclass(frozen=True)
class Prepare:
    """Start preparing ``docs`` in batches, in a thread, ahead of the writes
    (see ``.batches.prepared_batches``); the plan is sent a handle for
    ``NextBatch``. The face closes it when the plan ends."""

    docs: Docs
    batch_size: int
    stop_at_error: bool
    limits: Limits | None
    redactor: Redactor | None = None


@dataclass(frozen=True)
class NextBatch:
    """Wait for the next prepared batch (``None`` after the last), without
    blocking an event loop."""

    batches: Any


@dataclass(frozen=True)
class Connected(Generic[R]):
    """Archives only: run ``call`` on a connection of the archive's own, in a
    transaction if ``transaction``, for an archive-wide operation (migrations,
    switches). ``schema``: the archive must be at this version's revision
    first; ``changes_schema``: look again at the next call."""

    call: Callable[[Connection], R]
    transaction: bool = False
    schema: bool = True
    changes_schema: bool = False


@dataclass(frozen=True)
class Emit(Generic[T]):
    """Hand ``items`` to whoever iterates the operation (``export``)."""

    items: Sequence[T]


Instruction = Step[Any] | Together[Any] | InTransaction[Any] | Prepare | NextBatch | Connected[Any]
#: A plan that ends with a result of type R.
Plan = Generator[Instruction, Any, R]
#: A plan that emits items of type T.
Stream = Generator[Instruction | Emit[T], Any, None]


class PlanRun(Generic[R]):
    """A plan being carried out: the next instruction, and the result or error
    of the one before sent back in (an error is raised in the plan, where its
    ``except`` and ``finally`` blocks run)."""

    def __init__(self, plan: Generator[Any, Any, R]) -> None:
        self._plan = plan
        self._value: Any = None
        self._error: BaseException | None = None
        self.result: R | None = None

    def next(self) -> Any | None:
        """The next instruction; ``None`` once the plan has ended (its result in ``result``)."""
        error, self._error = self._error, None
        try:
            if error is not None:
                return self._plan.throw(error)
            return self._plan.send(self._value)
        except StopIteration as stop:
            self.result = stop.value
            return None

    def resolved(self, value: Any) -> None:
        self._value = value

    def failed(self, error: BaseException) -> None:
        self._error = error

    def close(self) -> None:
        self._plan.close()


def primed(plan: Generator[Any, Any, R]) -> Generator[Any, Any, R]:
    """``plan`` run now up to its first instruction, then carried on as it
    was: its argument checks (before its first instruction; a plan does no
    I/O) raise at the call, not at the first ``next()`` of whoever iterates."""
    try:
        first = next(plan)
    except StopIteration as stop:
        return _ended(stop.value)
    return _resumed(plan, first)


def _ended(result: R) -> Generator[Any, Any, R]:
    return result
    yield  # a generator that ends at once with ``result``


def _resumed(plan: Generator[Any, Any, R], instruction: Any) -> Generator[Any, Any, R]:
    while True:
        try:
            value = yield instruction
        except GeneratorExit:
            plan.close()
            raise
        except BaseException as exc:  # raised in the plan, where its clean-up runs
            try:
                instruction = plan.throw(exc)
            except StopIteration as stop:
                return cast(R, stop.value)
            continue
        try:
            instruction = plan.send(value)
        except StopIteration as stop:
            return cast(R, stop.value)
