package io.turnstile.example;

import io.turnstile.client.AcquireOptions;
import io.turnstile.client.Hold;
import io.turnstile.client.TurnstileClient;
import io.turnstile.client.TurnstileException;
import java.time.Duration;

/**
 * Takes a lock, prints its fencing token, releases it:
 * <pre>java -cp build/java/classes:$(cat build/java/classpath.txt) io.turnstile.example.Example \
 *     --server 127.0.0.1:7400 my-lock</pre>
 */
public final class Example {
  public static void main(String[] args) throws Exception {
    String server = "127.0.0.1:7400";
    String lock = "my-lock";
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--server") && i + 1 < args.length) {
        server = args[++i];
      } else {
        lock = args[i];
      }
    }
    AcquireOptions options = AcquireOptions.builder()
        .owner("java-example")
        .waitTimeout(Duration.ofSeconds(30))
        .ttl(Duration.ofSeconds(10))  // renewed with KeepAlive by the library
        .onLost((h, reason, message) -> System.err.println("lost: " + reason + " " + message))
        .onRevokeRequested((h, requester, reason) -> h.release())  // let go when asked
        .build();
    try (TurnstileClient client = TurnstileClient.connect(server);
         Hold hold = client.acquire(lock, options)) {
      System.out.println("holding " + lock + " with fencing token " + hold.fencingToken()
          + " (lease " + hold.leaseId() + ")");
      // ... work, passing hold.fencingToken() to the protected resource;
      // check hold.isHeld() before each step of long work
    } catch (TurnstileException e) {
      System.err.println("could not take " + lock + ": " + e.getCode() + " " + e.getDetails());
      System.exit(1);
    }
  }
}
