"""Test-only faults the broker injects when told to (the `gregor.test.fault.*` properties), off otherwise.

Production does not pay for them: the broker builds a `ProduceFaults` only when a fault property is set
and hands the Produce path None otherwise, so the hot path's whole cost is one `is None` test.
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.configdef import Settings, setting


@dataclass(frozen=True, slots=True)
class FaultSettings(Settings):
    drop_produce_response_every: int = setting("gregor.test.fault.drop.produce.response.after.append")


class ProduceFaults:
    """gregor.test.fault.drop.produce.response.after.append=N: every Nth Produce of this broker is appended
    and its connection then closed instead of answered, as a network failure would, so the client retries
    a batch that is already in the log (what idempotence and its tests are about)."""

    def __init__(self, drop_response_every: int) -> None:
        assert drop_response_every > 0
        self.drop_response_every = drop_response_every
        self.produces = 0

    @classmethod
    def from_settings(cls, settings: FaultSettings) -> ProduceFaults | None:
        """The faults to inject, or None when no fault property is set (production)."""
        every = settings.drop_produce_response_every
        return cls(every) if every > 0 else None

    def drop_response(self) -> bool:
        """Counts a Produce; whether its response is to be dropped and its connection closed."""
        self.produces += 1
        return self.produces % self.drop_response_every == 0
