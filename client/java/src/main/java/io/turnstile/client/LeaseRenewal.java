package io.turnstile.client;

import io.grpc.Status;
import java.time.Duration;

/** One lease's answer to KeepAlive: OK (renewed for validFor), NOT_FOUND (gone), ... */
public record LeaseRenewal(String leaseId, Status.Code code, String message, Duration validFor) {}
