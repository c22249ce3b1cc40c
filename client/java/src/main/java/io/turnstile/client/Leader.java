package io.turnstile.client;

import java.time.Instant;
import java.util.Map;

/**
 * An election's leader as observers see it: the holder of the election's
 * lock. {@code value} is its metadata "value"; {@code fencingToken} its term
 * (greater than every earlier leader's); {@code granted} when it became
 * leader where the replica knows it (else null); {@code since} when it
 * queued; {@code identity} its verified mutual-TLS identity ("" without).
 */
public record Leader(String name, String value, String owner, String identity, long fencingToken,
                     Instant granted, Instant since, Map<String, String> metadata) {}
