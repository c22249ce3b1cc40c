package io.turnstile.client;

import java.util.List;

/** List's answer: names in byte order; truncated when more matched the limit. */
public record LockList(List<String> names, boolean truncated) {}
