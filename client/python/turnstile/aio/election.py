"""Leader election for the asyncio client: turnstile.election's rules (the
leader holds the exclusive lock `name`, its value is the hold's metadata
"value", its term the fencing token; a campaign re-queues invisibly when a
replica ends its wait), awaited.

    election = turnstile.aio.Election(client, "jobs/scheduler", owner="host-a",
                                      on_leadership=said)
    term = await election.campaign("host-a:8080")   # until host-a leads
    await election.proclaim("host-a:9090")
    await election.resign()

on_leadership(is_leader, reason) is said on the event loop, at once, with
the threaded Election's reasons; a REVOKE_REQUESTED resigns (a task of its
own) unless resign_on_revoke=False. Cancelling campaign() gives its wait up
and leaves no node.
"""

import asyncio
import time
from typing import Callable, Dict, Optional

from ..client import TurnstileError
from ..election import DEFAULT_ATTEMPT_WAIT, ElectionState, Leadership, Requeue

__all__ = ["Election", "requeue_until"]


async def requeue_until(timeout: Optional[float], attempt, attempt_wait: float,
                        clock: Callable[[], float] = time.monotonic):
    """Awaits attempt(wait) until it returns, re-queueing as
    turnstile.election.Requeue plans."""
    plan = Requeue(timeout, attempt_wait, clock)
    while True:
        wait = plan.next_wait()
        try:
            return await attempt(wait)
        except TurnstileError as e:
            delay = plan.after(e)
        if delay > 0:
            await asyncio.sleep(delay)


class Election(ElectionState):
    """Campaigns for the lock `name` through a turnstile.aio.Client; the
    options are turnstile.Election's."""

    def __init__(self, client, name: str, owner: str = "",
                 on_leadership: Optional[Callable[[bool, str], None]] = None,
                 metadata: Optional[Dict[str, str]] = None, resign_on_revoke: bool = True,
                 ttl: float = 0.0, lock_delay: float = 0.0,
                 attempt_wait: float = DEFAULT_ATTEMPT_WAIT):
        super().__init__(client, name, owner, on_leadership, metadata, resign_on_revoke, ttl,
                         lock_delay, attempt_wait)

    async def campaign(self, value: str, timeout: Optional[float] = None) -> Leadership:
        """Returns once this candidate leads (timeout None: no limit), or
        the term it holds already."""
        term, attempt, end = self._campaign_plan(value, timeout)
        if term is not None:
            return term
        while True:
            lock = await requeue_until(self._left(end), attempt, self._attempt_wait, self._clock)
            term = self._took(lock, value)
            if term is not None:
                return term

    async def proclaim(self, value: str) -> None:
        """Replaces the leader's value, keeping the leadership (the errors
        are turnstile.Election.proclaim's)."""
        lk, metadata = self._proclaim_plan(value)
        await self._client.proclaim(lk.lease_id, lk.fencing_token, metadata)
        self._proclaimed(lk, value)

    async def resign(self) -> bool:
        """Gives up leadership: on_leadership(False, "RESIGNED") first, then
        the hold is released. True if it was held until now."""
        lk = self._resign_said()
        if lk is None:
            return False
        return await lk.release()
