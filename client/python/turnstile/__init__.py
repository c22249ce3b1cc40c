"""turnstile: the Python client of turnstile, a fair, herd-free distributed
lock service (turnstile.v1.LockService over gRPC).

    import turnstile

    with turnstile.Client("127.0.0.1:7400") as client:
        with client.acquire("my-lock", wait_timeout=30) as lock:
            print(lock.fencing_token)

Modules: turnstile.client (Client, Lock, observe, check_token), turnstile.election
(Election), turnstile.multilock (acquire_all), and turnstile.v1 (the
generated protobuf messages and gRPC stubs of the contract). Every public
name is also available here.
"""

from .client import (CURRENT, HELD, LEADER, LOST, NO_LEADER, RELEASED, SUPERSEDED, SUSPENDED,
                     TOKEN_WAITING, UNKNOWN, WAITING, Client, Contender, Description, Leader,
                     LeaderEvent, LeaseStatus, Lock, LockNames, Observation, TokenCheck,
                     TurnstileError, load_stubs, retry_delays, retry_until, tls_credentials,
                     validate_acquire_options, watchdog_step)
from .election import DEFAULT_ATTEMPT_WAIT, Election, Leadership, requeue_until
from .multilock import MultiLock, acquire_all, canonical_order

__version__ = "0.1.0"

__all__ = [
    "Client", "Lock", "TurnstileError", "Contender", "Description", "LockNames", "LeaseStatus",
    "Leader", "LeaderEvent", "Observation", "Election", "Leadership", "MultiLock",
    "acquire_all", "canonical_order", "tls_credentials", "load_stubs", "watchdog_step",
    "retry_delays", "retry_until", "requeue_until", "validate_acquire_options",
    "DEFAULT_ATTEMPT_WAIT", "WAITING", "HELD", "SUSPENDED", "LOST", "RELEASED",
    "LEADER", "NO_LEADER", "UNKNOWN", "TokenCheck", "CURRENT", "SUPERSEDED", "TOKEN_WAITING",
]
