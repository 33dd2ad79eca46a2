"""Every operation declared once, and how each face carries it out.

``ChatArchive``, ``AsyncChatArchive``, ``ChatRepository`` and
``AsyncChatRepository`` offer the same operations (``save``, ``get``,
``append``...). Each is declared here once, in ``ChatOperations`` (and
the archive-wide ones in ``ArchiveOperations``), from its one
implementation: a function of a unit of work, or a plan of steps (see
``chatarchive._repository.plans``). A face is a ``SyncFace`` or an
``AsyncFace``: the declaration gives the same operation, with the same
arguments, documentation and errors, returning its result on the first and
awaitable on the second. The faces differ only in how they carry out a step:
in a transaction of their own (archives) or in the caller's (repositories).
"""

from __future__ import annotations

import asyncio
import collections.abc
import functools
import inspect
import threading
import typing
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, AbstractContextManager, AsyncExitStack, ExitStack
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

from . import _admin
from ._arguments import require_many
from ._repository import analytics, bulk, compaction, reads, sealing, streaming, writes
from ._repository import prices as pricing
from ._repository.batches import Batches, PreparedBatch, prepared_batches
from ._repository.plans import (
    Connected,
    Emit,
    FaceFacts,
    InTransaction,
    Kind,
    NextBatch,
    Plan,
    PlanRun,
    Prepare,
    Step,
    Stream,
    Together,
    primed,
)
from ._repository.unit import Unit

__all__ = ["ArchiveOperations", "AsyncFace", "ChatOperations", "SyncFace"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


# -- the faces ---------------------------------------------------------------------------


class SyncFace(ABC):
    """A face whose operations return their results."""

    @abstractmethod
    def _facts(self) -> FaceFacts:
        """What the plans may know of this face."""

    @abstractmethod
    def _operation(self) -> AbstractContextManager[None]:
        """Around a whole operation (a repository's turn, an archive's checks)."""

    @abstractmethod
    def _step(self, step: Step[R]) -> R:
        """Run one step in a unit of work."""

    @abstractmethod
    def _transaction_face(self) -> AbstractContextManager[SyncFace]:
        """A face whose steps all run in one transaction."""

    def _in_transaction(self, start: Callable[[FaceFacts], Plan[R]]) -> R:
        """Run a plan in one transaction."""
        with self._transaction_face() as face:
            return face._drive(start(face._facts()))

    def _together(self, steps: Sequence[Step[R]], stack: ExitStack) -> list[R]:
        """Run the steps at once, in threads."""
        if len(steps) == 1:
            return [self._step(steps[0])]
        pool = _pool(stack, len(steps))
        futures = [pool.submit(self._step, step) for step in steps]
        return _results([future.exception() or future.result() for future in futures])

    def _connected(self, instruction: Connected[R]) -> R:
        raise TypeError(f"{type(self).__name__} runs no archive-wide operation")

    def _run(self, plan: Plan[R]) -> R:
        """Carry out ``plan`` as one operation; its result."""
        with self._operation():
            return self._drive(plan)

    def _run_step(self, step: Step[R]) -> R:
        """Carry out an operation of one step."""
        with self._operation():
            return self._step(step)

    def _drive(self, plan: Plan[R]) -> R:
        with ExitStack() as stack:
            run = PlanRun(plan)
            try:
                while (instruction := run.next()) is not None:
                    if isinstance(instruction, Emit):
                        raise TypeError("only a stream emits")
                    _carry_out(run, functools.partial(self._do, instruction, stack))
            finally:
                run.close()
            return cast(R, run.result)

    def _stream(self, plan: Stream[T]) -> Iterator[T]:
        """Carry out ``plan``, yielding what it emits. Each step is an
        operation of its own: whoever iterates may call the face in between."""
        with ExitStack() as stack:
            run: PlanRun[None] = PlanRun(plan)
            try:
                while (instruction := run.next()) is not None:
                    if isinstance(instruction, Emit):
                        yield from instruction.items
                        run.resolved(None)
                        continue
                    with self._operation():
                        _carry_out(run, functools.partial(self._do, instruction, stack))
            finally:
                run.close()

    def _do(self, instruction: Any, stack: ExitStack) -> Any:
        if isinstance(instruction, Step):
            return self._step(instruction)
        if isinstance(instruction, Together):
            return self._together(instruction.steps, stack)
        if isinstance(instruction, Prepare):
            require_many(instruction.docs, "docs", "chat documents (save takes one)")
            batches = _prepared(instruction, instruction.docs)
            stack.callback(batches.close)
            return batches
        if isinstance(instruction, NextBatch):
            return next(instruction.batches.batches, None)
        if isinstance(instruction, InTransaction):
            return self._in_transaction(instruction.start)
        if isinstance(instruction, Connected):
            return self._connected(instruction)
        raise TypeError(f"not an instruction: {instruction!r}")


class AsyncFace(ABC):
    """A face whose operations are awaited."""

    @abstractmethod
    def _facts(self) -> FaceFacts:
        """What the plans may know of this face."""

    @abstractmethod
    def _operation(self) -> AbstractAsyncContextManager[None]:
        """Around a whole operation (a repository's turn, an archive's checks)."""

    @abstractmethod
    async def _step(self, step: Step[R]) -> R:
        """Run one step in a unit of work."""

    @abstractmethod
    def _transaction_face(self) -> AbstractAsyncContextManager[AsyncFace]:
        """A face whose steps all run in one transaction."""

    async def _in_transaction(self, start: Callable[[FaceFacts], Plan[R]]) -> R:
        """Run a plan in one transaction."""
        async with self._transaction_face() as face:
            return await face._drive(start(face._facts()))

    async def _together(self, steps: Sequence[Step[R]]) -> list[R]:
        """Run the steps at once, in tasks."""
        return _results(await asyncio.gather(*(self._step(step) for step in steps), return_exceptions=True))

    async def _connected(self, instruction: Connected[R]) -> R:
        raise TypeError(f"{type(self).__name__} runs no archive-wide operation")

    async def _run(self, plan: Plan[R]) -> R:
        """Carry out ``plan`` as one operation; its result."""
        async with self._operation():
            return await self._drive(plan)

    async def _run_step(self, step: Step[R]) -> R:
        """Carry out an operation of one step."""
        async with self._operation():
            return await self._step(step)

    async def _drive(self, plan: Plan[R]) -> R:
        async with AsyncExitStack() as stack:
            run = PlanRun(plan)
            try:
                while (instruction := run.next()) is not None:
                    if isinstance(instruction, Emit):
                        raise TypeError("only a stream emits")
                    await _carry_out_async(run, self._do(instruction, stack))
            finally:
                run.close()
            return cast(R, run.result)

    async def _stream(self, plan: Stream[T]) -> AsyncIterator[T]:
        """Carry out ``plan``, yielding what it emits. Each step is an
        operation of its own: whoever iterates may call the face in between."""
        async with AsyncExitStack() as stack:
            run: PlanRun[None] = PlanRun(plan)
            try:
                while (instruction := run.next()) is not None:
                    if isinstance(instruction, Emit):
                        for item in instruction.items:
                            yield item
                        run.resolved(None)
                        continue
                    async with self._operation():
                        await _carry_out_async(run, self._do(instruction, stack))
            finally:
                run.close()

    async def _do(self, instruction: Any, stack: AsyncExitStack) -> Any:
        if isinstance(instruction, Step):
            return await self._step(instruction)
        if isinstance(instruction, Together):
            return await self._together(instruction.steps)
        if isinstance(instruction, Prepare):
            docs = instruction.docs
            if isinstance(docs, AsyncIterable):
                docs = _AsyncInput(docs, asyncio.get_running_loop())
            else:
                require_many(docs, "docs", "chat documents (save takes one)")
            batches = _prepared(instruction, docs)
            stack.push_async_callback(batches.close_off_the_loop)
            return batches
        if isinstance(instruction, NextBatch):
            return await instruction.batches.next_off_the_loop()
        if isinstance(instruction, InTransaction):
            return await self._in_transaction(instruction.start)
        if isinstance(instruction, Connected):
            return await self._connected(instruction)
        raise TypeError(f"not an instruction: {instruction!r}")


def _carry_out(run: PlanRun[Any], do: Callable[[], Any]) -> None:
    try:
        run.resolved(do())
    except BaseException as exc:  # raised in the plan, where its clean-up runs
        run.failed(exc)


async def _carry_out_async(run: PlanRun[Any], doing: Awaitable[Any]) -> None:
    try:
        run.resolved(await doing)
    except BaseException as exc:  # raised in the plan, where its clean-up runs
        run.failed(exc)


def _results(outcomes: Sequence[Any]) -> list[Any]:
    """The results of steps run together; the first error raised, once all have ended."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return list(outcomes)


def _pool(stack: ExitStack, workers: int) -> ThreadPoolExecutor:
    """The threads of parallel writers, for the rest of the operation."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chatarchive-writer")
    stack.callback(pool.shutdown)
    return pool


# -- save_many's batches --------------------------------------------------------------------


class _Batches:
    """The batches of a ``save_many`` being prepared in a thread, for either face."""

    def __init__(self, batches: Batches, abandoned: threading.Event, source: object) -> None:
        self.batches = batches
        self._abandoned = abandoned
        self._source = source

    def close(self) -> None:
        if isinstance(self._source, _AsyncInput):
            self._source.close()
        self.batches.close()

    async def close_off_the_loop(self) -> None:
        if isinstance(self._source, _AsyncInput):
            self._source.close()
        await asyncio.to_thread(self.batches.close)

    async def next_off_the_loop(self) -> PreparedBatch | None:
        """The next batch, waited for off the event loop. If the caller is
        cancelled meanwhile (a timeout), the batches are abandoned and the
        thread that waits for them is let go (within ~0.05 s) before the
        cancellation goes on, so that they can be closed: a generator cannot
        be closed while another thread runs it ("generator already executing")."""
        waiting = asyncio.ensure_future(asyncio.to_thread(next, self.batches, None))
        try:
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            self._abandoned.set()
            await asyncio.wait([waiting])
            raise


def _prepared(prepare: Prepare, docs: Any) -> _Batches:
    abandoned = threading.Event()
    batches = prepared_batches(
        docs,
        prepare.batch_size,
        stop_at_error=prepare.stop_at_error,
        limits=prepare.limits,
        redactor=prepare.redactor,
        abandoned=abandoned,
    )
    return _Batches(batches, abandoned, docs)


class _AsyncInput:
    """An async iterable read by save_many's preparing thread: each item is
    awaited on the event loop that runs save_many, while the thread waits for
    it, so batches are prepared ahead of the writes as from an iterable.
    ``close`` cancels the item being awaited, if any (save_many stopped
    early, and the next item of an idle stream may be long to come)."""

    def __init__(self, docs: AsyncIterable[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._iterator = aiter(docs)
        self._loop = loop
        self._lock = threading.Lock()
        self._waiting: Future[list[Any]] | None = None
        self._closed = False

    def __iter__(self) -> Iterator[Any]:
        while True:
            with self._lock:
                if self._closed:
                    return
                self._waiting = waiting = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
            try:
                item = waiting.result()
            except CancelledError:
                return
            if not item:
                return
            yield item[0]

    async def _next(self) -> list[Any]:
        """The next item alone in a list; none at the end."""
        try:
            return [await anext(self._iterator)]
        except StopAsyncIteration:
            return []

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._waiting is not None:
                self._waiting.cancel()


# -- declarations -------------------------------------------------------------------------


class _Declared(Generic[P, R]):
    """An operation declared once, from its ``source``: a function of a unit
    of work (an operation of one ``step``), or one that makes the operation's
    plan from the face's facts and the call's arguments. Bound to a face, it
    is a method of that face; read from a face's class, a function of the face
    and the call's arguments (as a method read from its class is), with the
    source's documentation and signature."""

    def __init__(
        self, source: Callable[..., Any], *, streams: bool = False, step: Kind | None = None
    ) -> None:
        self._source = source
        self._streams = streams
        self._step = step
        self.__doc__ = source.__doc__
        self.__wrapped__ = source
        signature = inspect.signature(source)
        self._parameters = list(signature.parameters.values())[1:]
        self._returns = signature.return_annotation
        #: The signature a face's bound call shows, by face class (made once: an
        #: operation is looked up on every call).
        self._signatures: dict[type, inspect.Signature] = {}

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name

    def _get(self, face: object, owner: type) -> Any:
        if face is None:
            return self._method(owner)
        source, kind = self._source, self._step
        call: Callable[..., Any]
        if kind is not None and isinstance(face, SyncFace):

            def call(*args: Any, **kwargs: Any) -> Any:
                return face._run_step(Step(kind, lambda unit: source(unit, *args, **kwargs)))

        elif kind is not None:
            assert isinstance(face, AsyncFace)

            async def call(*args: Any, **kwargs: Any) -> Any:
                return await face._run_step(Step(kind, lambda unit: source(unit, *args, **kwargs)))

        elif self._streams:
            assert isinstance(face, (SyncFace, AsyncFace))

            def call(*args: Any, **kwargs: Any) -> Any:
                # Primed: a bad argument raises here, not at the first item.
                return face._stream(primed(source(face._facts(), *args, **kwargs)))

        elif isinstance(face, SyncFace):

            def call(*args: Any, **kwargs: Any) -> Any:
                return face._run(source(face._facts(), *args, **kwargs))

        else:
            assert isinstance(face, AsyncFace)

            async def call(*args: Any, **kwargs: Any) -> Any:
                return await face._run(source(face._facts(), *args, **kwargs))

        signature = self._signatures.get(owner)
        if signature is None:
            signature = inspect.Signature(self._parameters, return_annotation=self._result(owner))
            self._signatures[owner] = signature
        return self._named(call, owner, signature)

    def _method(self, owner: type) -> Callable[..., Any]:
        name = self.__name__
        method: Callable[..., Any]
        if issubclass(owner, AsyncFace) and not self._streams:

            async def method(face: Any, /, *args: Any, **kwargs: Any) -> Any:
                return await getattr(face, name)(*args, **kwargs)

        else:

            def method(face: Any, /, *args: Any, **kwargs: Any) -> Any:
                return getattr(face, name)(*args, **kwargs)

        itself = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        signature = inspect.Signature([itself, *self._parameters], return_annotation=self._result(owner))
        return self._named(method, owner, signature)

    def _result(self, owner: type) -> Any:
        """What a call returns, as the face shows it: a plan's result, a
        stream's iterator (asynchronous on an asyncio face), or a step's."""
        returns = typing.get_type_hints(self._source).get("return", inspect.Signature.empty)
        if returns is type(None):
            return None
        if typing.get_origin(returns) is not collections.abc.Generator:
            return returns
        instructions, _, result = typing.get_args(returns)
        if not self._streams:
            return result  # a Plan[R]
        (items,) = (
            typing.get_args(kind)[0]
            for kind in typing.get_args(instructions)
            if typing.get_origin(kind) is Emit
        )
        return AsyncIterator[items] if issubclass(owner, AsyncFace) else Iterator[items]  # type: ignore[valid-type]

    def _named(
        self, call: Callable[..., Any], owner: type, signature: inspect.Signature
    ) -> Callable[..., Any]:
        call.__name__ = self.__name__
        call.__qualname__ = f"{owner.__name__}.{self.__name__}"
        call.__module__ = owner.__module__
        call.__doc__ = self.__doc__
        call.__signature__ = signature  # type: ignore[attr-defined]
        return call


class _Operation(_Declared[P, R]):
    @overload
    def __get__(self, face: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(self, face: SyncFace, owner: type) -> Callable[P, R]: ...
    @overload
    def __get__(self, face: AsyncFace, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, face: object, owner: type) -> Any:
        return self._get(face, owner)


class _StreamOperation(_Declared[P, R]):
    @overload
    def __get__(self, face: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(self, face: SyncFace, owner: type) -> Callable[P, Iterator[R]]: ...
    @overload
    def __get__(self, face: AsyncFace, owner: type) -> Callable[P, AsyncIterator[R]]: ...

    def __get__(self, face: object, owner: type) -> Any:
        return self._get(face, owner)


def reading(function: Callable[Concatenate[Unit, P], R]) -> _Operation[P, R]:
    """A read of one unit of work."""
    return _Operation(function, step=Kind.READ)


def writing(function: Callable[Concatenate[Unit, P], R]) -> _Operation[P, R]:
    """A write of one unit of work."""
    return _Operation(function, step=Kind.WRITE)


def planned(function: Callable[Concatenate[FaceFacts, P], Plan[R]]) -> _Operation[P, R]:
    """An operation of several steps."""
    return _Operation(function)


def streamed(function: Callable[Concatenate[FaceFacts, P], Stream[T]]) -> _StreamOperation[P, T]:
    """An operation whose steps hand items to whoever iterates it."""
    return _StreamOperation(function, streams=True)


class ChatOperations:
    """The operations on chats, on archives and repositories alike."""

    save = writing(writes.save)
    save_many = planned(bulk.save_many)
    get = reading(reads.get)
    find = reading(reads.find)
    get_tree = reading(reads.get_tree)
    get_many = reading(reads.get_many)
    append = planned(writes.append)
    regenerate = writing(writes.regenerate)
    edit = writing(writes.edit)
    set_active_leaf = writing(writes.set_active_leaf)
    record_completion = writing(streaming.record_completion)
    record_message = writing(streaming.record_message)
    record_response = writing(streaming.record_response)
    begin_message = writing(streaming.begin_message)
    append_chunk = writing(streaming.append_chunk)
    complete_message = writing(streaming.complete_message)
    add_feedback = writing(writes.add_feedback)
    delete_feedback = writing(writes.delete_feedback)
    update = writing(writes.update)
    update_message = writing(writes.update_message)
    truncate = writing(writes.truncate)
    compact = writing(compaction.compact)
    history = reading(compaction.history)
    delete = writing(writes.delete)
    delete_user = writing(writes.delete_user)
    delete_user_key = writing(writes.delete_user_key)
    rewrap_user_keys = writing(sealing.rewrap)
    delete_older_than = planned(writes.delete_older_than)
    list_chats = reading(reads.list_chats)
    count_chats = reading(reads.count_chats)
    chat_ids = reading(reads.chat_ids)
    search = reading(reads.search)
    export = streamed(reads.export)
    daily_usage = reading(analytics.daily_usage)
    model_usage = reading(analytics.model_usage)
    workflow_usage = reading(analytics.workflow_usage)
    user_activity = reading(analytics.user_activity)
    tool_usage = reading(analytics.tool_usage)
    feedback_summary = reading(analytics.feedback_summary)
    cost = reading(pricing.cost)
    prices = reading(pricing.prices)
    load_prices = writing(pricing.load_prices)


class ArchiveOperations:
    """The operations on an archive as a whole: its migrations and switches."""

    upgrade = planned(_admin.upgrade)
    downgrade = planned(_admin.downgrade)
    current_revision = planned(_admin.current_revision)
    check = planned(_admin.check)
    distribution = planned(_admin.distribution)
    distribute = planned(_admin.distribute)
    undistribute = planned(_admin.undistribute)
    row_level_security = planned(_admin.row_level_security)
    set_row_level_security = planned(_admin.set_row_level_security)
    search_index = planned(_admin.search_index)
    set_search_index = planned(_admin.set_search_index)
    rebuild_search_index = planned(_admin.rebuild_search_index)
    search_settings = planned(_admin.search_settings)
    configure_search = planned(_admin.configure_search)
    attachments_stored_once = planned(_admin.attachments_stored_once)
    set_attachments_stored_once = planned(_admin.set_attachments_stored_once)
    index_pending = planned(_admin.index_pending)
