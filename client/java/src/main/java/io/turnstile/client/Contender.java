package io.turnstile.client;

import java.time.Instant;
import java.util.Map;

/** A holder or waiter of a lock, as Describe shows it. */
public record Contender(String owner, Map<String, String> metadata, Instant since,
                        long fencingToken, String replicaId, long position, LockKind kind,
                        long revokeRequests, String revokeRequester, String revokeReason,
                        String identity, int maxHolders, Instant granted) {}
