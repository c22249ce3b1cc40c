"""All-or-nothing multi-lock for the asyncio client: the rules of
turnstile.multilock (canonical order, one deadline, every lock released
when any cannot be had, the set lost when any member is), awaited.

    async with client.lock_all(["accounts/7", "accounts/3"], wait_timeout=10) as locks:
        locks.fencing_tokens["accounts/3"]   # each name keeps its own token

Cancelling the task that awaits lock_all cancels the streams of the locks
already taken and of the one being waited for: the replicas delete their
nodes, and nothing of the set is left.
"""

import asyncio
from typing import Callable, Dict, Iterable, Optional

from ..hold import HELD, SUSPENDED
from ..multilock import AllOrNothing, MultiLockState

__all__ = ["MultiLock", "lock_all"]


class MultiLock(MultiLockState):
    """Several holds taken together by Client.lock_all. `locks` maps each
    name to its turnstile.aio.Lock in canonical order; `fencing_tokens` and
    `lease_ids` the same way. An async context manager that releases every
    lock on exit."""

    def __init__(self, client, on_state: Optional[Callable[[str, str, str], None]] = None):
        super().__init__(on_state)
        self._client = client

    async def release(self, timeout: float = 10.0) -> bool:
        """Releases every lock (in reverse order). True if all were still
        held until now; False if the set had been lost. Idempotent."""
        was = self._begin_release()
        ok = await self._release_all(timeout)
        return ok and was in (HELD, SUSPENDED)

    async def __aenter__(self) -> "MultiLock":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.release()

    async def _release_all(self, timeout: float) -> bool:
        ok = True
        for lk in reversed(list(self.locks.values())):
            try:
                ok = await lk.release(timeout) and ok
            except Exception:  # noqa: BLE001 - keep releasing the others
                ok = False
        return ok

    def _let_go(self) -> None:
        self._client._background.run(self._release_all(10.0), "releasing a lost multi-lock")

    def _cancel_all(self) -> None:
        for lk in self.locks.values():
            lk._abandon()


async def lock_all(client, names: Iterable[str], wait_timeout: float,
                   on_state: Optional[Callable[[str, str, str], None]],
                   lock_options: Dict[str, object]) -> MultiLock:
    """Takes every lock of `names` through client.lock (see the module doc
    and turnstile.multilock.acquire_all for the errors)."""
    for key in ("on_state", "wait_timeout"):
        lock_options.pop(key, None)
    plan = AllOrNothing(names, wait_timeout)
    multi = MultiLock(client, on_state)
    try:
        for name in plan.order:
            left = plan.wait_for(name, len(multi.locks))
            multi._took(name, await client.lock(name, wait_timeout=left,
                                                on_state=multi._member_state, **lock_options))
        multi._complete()
        return multi
    except asyncio.CancelledError:
        multi._abandon()
        multi._cancel_all()  # at once: the task is being cancelled
        raise
    except BaseException:
        multi._abandon()
        await multi._release_all(10.0)
        raise
