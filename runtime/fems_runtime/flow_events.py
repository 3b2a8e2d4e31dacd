"""The events of the flow (:mod:`fems_runtime.events`): an ``@assign`` statement as a turn,
the branches of a fork, ``par`` or ``for`` inside it, and its join. :class:`~fems_runtime.flow.
Context` calls these only while someone listens, so a run nobody watches takes the plain
path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fems_runtime.events import (
    Assigned,
    BranchBegan,
    BranchEnded,
    ForkBegan,
    ForkJoined,
    ForkKind,
    TurnBegan,
    TurnEnded,
    Where,
)

if TYPE_CHECKING:
    from fems_runtime.events import RunEvents
    from fems_runtime.variables import Frame


class _Services(Protocol):
    @property
    def events(self) -> RunEvents: ...


class Context(Protocol):
    """What the flow's events need of a :class:`~fems_runtime.flow.Context`: the run's
    events, where it is, and the span its events happen in (a branch sets its own)."""

    span: int | None

    @property
    def services(self) -> _Services: ...

    def where(self, action: str | None = None, actor: str | None = None) -> Where: ...


def assigned(
    ctx: Context, where: Where, assign: Callable[[], None], target: str, op: str, value: Any
) -> None:
    """Run one ``@assign`` statement (``assign``) as a turn of its own, its assignment a point
    inside it."""
    events = ctx.services.events
    began = events.emit(TurnBegan(id=events.new_id(), parent=ctx.span, where=where, kind="assign"))
    try:
        assign()
    except BaseException as error:
        events.emit(TurnEnded.after(began, error, kind="assign"))
        raise
    if events.wants(Assigned):
        point = Assigned(
            id=events.new_id(), parent=began.id, where=where, target=target, op=op, value=value
        )
        events.emit(point)
    events.emit(TurnEnded.after(began, kind="assign"))


def fork_began(ctx: Context, kind: ForkKind, **fields: Any) -> ForkBegan | None:
    """The span of the branches starting at ``ctx``'s node, None when nobody listens."""
    events = ctx.services.events
    if not events.active:
        return None
    began = ForkBegan(id=events.new_id(), parent=ctx.span, where=ctx.where(), kind=kind, **fields)
    return events.emit(began)


async def in_branch(
    ctx: Context, fork: ForkBegan | None, index: int, work: Awaitable[str | None], **fields: Any
) -> str | None:
    """Await a branch's ``work`` in ``ctx``, the branch's context: a span inside ``fork``
    (``fields``: its target or item) when someone listens."""
    if fork is None:
        return await work
    events = ctx.services.events
    began = BranchBegan(
        id=events.new_id(), parent=fork.id, where=ctx.where(), index=index, **fields
    )
    ctx.span = events.emit(began).id
    try:
        reached = await work
    except BaseException as error:
        events.emit(BranchEnded.after(began, error))
        raise
    events.emit(BranchEnded.after(began, reached=reached))
    return reached


async def joined(ctx: Context, fork: ForkBegan | None, branches: Awaitable[Any]) -> None:
    """Await every branch of ``fork``; a failure ends the fork's span with its error."""
    try:
        await branches
    except BaseException as error:
        if fork is not None:
            ctx.services.events.emit(ForkJoined.after(fork, error, kind=fork.kind))
        raise


def fork_joined(
    ctx: Context,
    fork: ForkBegan | None,
    node: str | None,
    targets: Sequence[str] = (),
    frames: Sequence[Frame] = (),
    reached: bool = False,
) -> None:
    """The end of ``fork``: where the flow goes on, and which of its ``targets`` a ``join(n)``
    cancelled (their ``frames`` never finished); nothing when nobody listened."""
    if fork is None:
        return
    cancelled = tuple(t for t, f in zip(targets, frames, strict=True) if f.finished is None)
    ended = ForkJoined.after(fork, kind=fork.kind, node=node, reached=reached, cancelled=cancelled)
    ctx.services.events.emit(ended)
