package io.turnstile.client;

import java.time.Instant;
import java.util.List;

/**
 * Describe's answer: holders in grant order, waiters in queue order; for a
 * semaphore its N (else 0); delayedUntil while the lock is in lock-delay
 * (else null).
 */
public record LockDescription(String name, List<Contender> holders, List<Contender> waiters,
                              int maxHolders, Instant delayedUntil) {}
