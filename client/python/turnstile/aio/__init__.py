"""turnstile.aio: the asyncio client of turnstile, on grpc.aio.

    import turnstile.aio

    async def main():
        async with turnstile.aio.Client("127.0.0.1:7400") as client:
            async with client.lock("my-lock", wait_timeout=30) as hold:
                print(hold.fencing_token)

The twin of the threaded package `turnstile` (same options, states, events,
errors and careful-client rules; a hold costs no thread): Client, Lock and
Observation (turnstile.aio.client), Election (turnstile.aio.election),
MultiLock (turnstile.aio.multilock). The error type, the states and the
reply types are the threaded package's own, also available here.
"""

from ..client import (CURRENT, HELD, LEADER, LOST, NO_LEADER, RELEASED, SUPERSEDED, SUSPENDED,
                      TOKEN_WAITING, UNKNOWN, WAITING, Contender, Description, Leader,
                      LeaderEvent, LeaseStatus, LockNames, TokenCheck, TurnstileError,
                      tls_credentials)
from ..election import Leadership
from .client import Client, Lock, Observation
from .election import Election
from .multilock import MultiLock

__all__ = [
    "Client", "Lock", "Observation", "Election", "Leadership", "MultiLock", "TurnstileError",
    "Contender", "Description", "LockNames", "LeaseStatus", "Leader", "LeaderEvent",
    "TokenCheck", "tls_credentials", "WAITING", "HELD", "SUSPENDED", "LOST", "RELEASED",
    "LEADER", "NO_LEADER", "UNKNOWN", "CURRENT", "SUPERSEDED", "TOKEN_WAITING",
]
