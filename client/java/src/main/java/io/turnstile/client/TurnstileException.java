package io.turnstile.client;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;

/**
 * A failed turnstile call. {@link #getCode()} is the gRPC status code the
 * server (or the client) ended with, as documented in lock.proto:
 * FAILED_PRECONDITION for a try-once on a held lock, DEADLINE_EXCEEDED when a
 * wait timed out, INVALID_ARGUMENT for bad input, NOT_FOUND, UNAVAILABLE, ...
 */
public class TurnstileException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final Status.Code code;
  private final String details;

  public TurnstileException(Status.Code code, String details) {
    this(code, details, null);
  }

  public TurnstileException(Status.Code code, String details, Throwable cause) {
    super(code.name() + ": " + (details == null ? "" : details), cause);
    this.code = code;
    this.details = details == null ? "" : details;
  }

  /** The gRPC status code, e.g. {@code Status.Code.FAILED_PRECONDITION}. */
  public Status.Code getCode() {
    return code;
  }

  /** The status message (names the field and the limit for INVALID_ARGUMENT). */
  public String getDetails() {
    return details;
  }

  static TurnstileException from(Throwable t) {
    if (t instanceof TurnstileException) {
      return (TurnstileException) t;
    }
    Status s = Status.fromThrowable(t);
    return new TurnstileException(s.getCode(), s.getDescription(), t);
  }

  static TurnstileException from(Status s) {
    return new TurnstileException(s.getCode(), s.getDescription(), s.getCause());
  }
}
