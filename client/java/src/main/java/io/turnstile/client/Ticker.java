package io.turnstile.client;

/** A monotonic clock in nanoseconds (System.nanoTime); injectable for tests. */
@FunctionalInterface
public interface Ticker {
  long nanos();

  Ticker SYSTEM = System::nanoTime;
}
