"""Answers that are ready now or later: the handlers' and coordinators' results are a value when nothing
has to be waited for and a Future when something does (an acks=all write, a topic's creation), so the
common case costs no Task. These helpers keep that shape when building on such a result."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def then(result: T | asyncio.Future[T], build: Callable[[T], R]) -> R | asyncio.Future[R]:
    """`build(result)` now, or a Future of it once `result` is done (its exception or cancellation passed on)."""
    if not isinstance(result, asyncio.Future):
        return build(result)
    out: asyncio.Future[R] = asyncio.get_running_loop().create_future()

    def relay(f: asyncio.Future[T]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif (e := f.exception()) is not None:
            out.set_exception(e)
        else:
            out.set_result(build(f.result()))

    result.add_done_callback(relay)
    return out


def gather(results: list[Any]) -> list[Any] | asyncio.Future[list[Any]]:
    """The values of `results` (some may be Futures), in order: a list now, or a Future of it."""
    if not any(isinstance(r, asyncio.Future) for r in results):
        return results

    async def waited() -> list[Any]:
        return [await r if isinstance(r, asyncio.Future) else r for r in results]
    return asyncio.ensure_future(waited())


def after(pending: asyncio.Future[None] | None, run: Callable[[], R | asyncio.Future[R]]) -> R | asyncio.Future[R]:
    """`run()` now, or once `pending` (an internal topic's creation) has ended, whatever its outcome:
    what it left is for `run` to find in the metadata."""
    if pending is None:
        return run()

    async def later(pending: asyncio.Future[None]) -> R:
        await asyncio.wait([pending])
        got = run()
        return await got if isinstance(got, asyncio.Future) else got
    return asyncio.ensure_future(later(pending))
