package io.turnstile.client;

/**
 * Told while an acquire waits: its 1-based queue position (1 = next in line,
 * an upper bound), whenever it improves. acquire returns only after the
 * calls for the queue events before the grant have run.
 */
@FunctionalInterface
public interface QueuedListener {
  void queued(long position);
}
