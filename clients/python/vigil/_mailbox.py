"""An ordered, cancellation-safe queue whose consumer may pick by predicate."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Generic, TypeVar

from ._frames import ConnectionClosed, VigilError

T = TypeVar("T")


class Mailbox(Generic[T]):
    """Items in arrival order. `get` removes an item only when it returns it,
    so a `get` cancelled by a timeout loses nothing. Once closed, `get` drains
    what is left, then raises the closing error."""

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._arrived = asyncio.Event()
        self._error: VigilError | None = None

    def put(self, item: T) -> None:
        self._items.append(item)
        self._arrived.set()

    def close(self, error: VigilError | None = None) -> None:
        if self._error is None:
            self._error = error or ConnectionClosed()
        self._arrived.set()

    @property
    def closed(self) -> bool:
        return self._error is not None

    def __len__(self) -> int:
        return len(self._items)

    def take(self, predicate: Callable[[T], bool] | None = None) -> T | None:
        """The first item that matches, removed; None if there is none."""
        for index, item in enumerate(self._items):
            if predicate is None or predicate(item):
                del self._items[index]
                return item
        return None

    async def get(self, predicate: Callable[[T], bool] | None = None, timeout: float | None = None) -> T | None:
        """The first item that matches, waiting for it up to `timeout` seconds
        (None: forever); None after the timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            item = self.take(predicate)
            if item is not None:
                return item
            if self._error is not None:
                raise self._error
            self._arrived.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return None
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                pass
