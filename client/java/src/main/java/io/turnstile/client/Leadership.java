package io.turnstile.client;

/**
 * One term of a candidate as leader ({@link Election#campaign}): the value
 * it campaigned with, the term's fencing token (pass it to what the leader
 * writes to), its lease id, and the underlying {@link Hold}.
 */
public record Leadership(String name, String value, long fencingToken, String leaseId, Hold hold) {}
