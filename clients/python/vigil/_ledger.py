"""Cumulative acknowledgement for events handed to several consumers."""

from __future__ import annotations

from collections.abc import Callable


class Ledger:
    """Which received events are not finished yet, and the `ack` that follows.

    `ack` is cumulative on the wire, so it goes out only up to the event
    before the oldest one some consumer (the app's main loop, a session, a
    Bluetooth manager) still holds (docs/protocol.md, "Session logs", last
    paragraph). A new connection starts a new epoch: tokens of the old one
    finish nothing, since the daemon redelivers those events anyway."""

    MAIN = "main"

    def __init__(self, send_ack: Callable[[int], None]) -> None:
        self._send_ack = send_ack
        self._outstanding: dict[int, str] = {}
        self._highest = 0
        self._acked = 0
        self.epoch = 0

    def reset(self) -> None:
        self._outstanding.clear()
        self._highest = 0
        self._acked = 0
        self.epoch += 1

    def received(self, seq: int, consumer: str) -> Token:
        self._outstanding[seq] = consumer
        self._highest = max(self._highest, seq)
        return Token(self, seq, self.epoch)

    def finish(self, seq: int, epoch: int) -> None:
        if epoch != self.epoch:
            return
        self._outstanding.pop(seq, None)
        self._flush(None)

    def finish_main(self, up_to: int) -> None:
        """The app acknowledged `up_to`: every main-loop event up to it is done."""
        limit = self.take_main(up_to)
        if limit is not None:
            self._send_ack(limit)

    def take_main(self, up_to: int) -> int | None:
        """As `finish_main`, but the `ack` to send (None: none) is returned,
        for the caller to carry in its `finishedProcessing`."""
        for seq in [s for s, consumer in self._outstanding.items() if s <= up_to and consumer == self.MAIN]:
            del self._outstanding[seq]
        return self._advance(up_to)

    def _flush(self, requested: int | None) -> None:
        limit = self._advance(requested)
        if limit is not None:
            self._send_ack(limit)

    def _advance(self, requested: int | None) -> int | None:
        if self._outstanding:
            limit = min(self._outstanding) - 1
            if requested is not None:
                limit = min(limit, requested)
        else:
            limit = self._highest if requested is None else max(self._highest, requested)
        if limit > self._acked:
            self._acked = limit
            return limit
        return None


class Token:
    """One event held by a consumer; finishing it may let the `ack` advance."""

    __slots__ = ("_ledger", "seq", "_epoch", "_done")

    def __init__(self, ledger: Ledger, seq: int, epoch: int) -> None:
        self._ledger = ledger
        self.seq = seq
        self._epoch = epoch
        self._done = False

    def finish(self) -> None:
        if not self._done:
            self._done = True
            self._ledger.finish(self.seq, self._epoch)
