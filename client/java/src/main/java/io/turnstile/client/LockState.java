package io.turnstile.client;

import java.util.List;

/**
 * One state of an observed lock ({@link TurnstileClient#observe}): its
 * holders in grant order (a mutex: at most one, the leader), how many wait,
 * a semaphore's N. {@code unknown}: the replica has no ZooKeeper
 * connection, or the stream to it broke and the library observes again;
 * the holders then mean nothing. {@code sequence} numbers the events of one
 * stream (a gap: states skipped for a slow reader); it starts again with
 * every re-observe.
 */
public record LockState(String name, boolean unknown, List<Contender> holders, long waiters,
                        int maxHolders, long sequence, String message) {}
