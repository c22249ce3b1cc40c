package io.turnstile.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

class AcquireOptionsTest {
  @Test
  void defaults() {
    AcquireOptions o = AcquireOptions.builder().build();
    assertEquals(Duration.ofSeconds(60), o.waitTimeout());
    assertEquals(Duration.ZERO, o.ttl());
    assertEquals(LockKind.EXCLUSIVE, o.kind());
    assertEquals(0, o.maxHolders());
  }

  @Test
  void kindsAndTryOnce() {
    assertEquals(LockKind.SHARED, AcquireOptions.builder().shared().build().kind());
    AcquireOptions sem = AcquireOptions.builder().semaphore(3).build();
    assertEquals(LockKind.SEMAPHORE, sem.kind());
    assertEquals(3, sem.maxHolders());
    assertEquals(LockKind.SEMAPHORE, AcquireOptions.builder().maxHolders(2).build().kind());
    assertTrue(AcquireOptions.builder().tryOnce().build().tryOnce());
  }

  @Test
  void refusesWhatLockProtoForbids() {
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().waitTimeout(Duration.ofMillis(-1)).build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().ttl(Duration.ofMillis(100)).build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().lockDelay(Duration.ofSeconds(61)).build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().kind(LockKind.SEMAPHORE).build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().shared().maxHolders(2).build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().semaphore(2).lockDelay(Duration.ofSeconds(1)).build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().semaphore(2).revokeHolders("x").build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().owner("x".repeat(129)).build());
    assertThrows(IllegalArgumentException.class,
        () -> AcquireOptions.builder().metadata("", "v").build());
    AcquireOptions.Builder many = AcquireOptions.builder();
    for (int i = 0; i < 17; i++) {
      many.metadata("k" + i, "v");
    }
    assertThrows(IllegalArgumentException.class, many::build);
    // the edges are accepted
    AcquireOptions.builder().ttl(Duration.ofMillis(500)).lockDelay(Duration.ofSeconds(60))
        .owner("x".repeat(128)).revokeHolders("r".repeat(256)).build();
  }

  @Test
  void ipv4TargetsListEveryReplica() {
    List<InetSocketAddress> a = Ipv4NameResolverProvider.parse("127.0.0.1:1,127.0.0.2:2", false);
    assertEquals(2, a.size());
    assertEquals(1, a.get(0).getPort());
    assertEquals("127.0.0.2", a.get(1).getAddress().getHostAddress());
    assertEquals(1, Ipv4NameResolverProvider.parse("///10.0.0.1:7400", false).size());
    assertEquals(7, Ipv4NameResolverProvider.parse("[::1]:7", true).get(0).getPort());
    assertThrows(IllegalArgumentException.class, () -> Ipv4NameResolverProvider.parse("", false));
    assertThrows(IllegalArgumentException.class,
        () -> Ipv4NameResolverProvider.parse("127.0.0.1", false));
  }
}
