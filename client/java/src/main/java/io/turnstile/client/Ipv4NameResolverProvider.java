package io.turnstile.client;

import io.grpc.Attributes;
import io.grpc.EquivalentAddressGroup;
import io.grpc.NameResolver;
import io.grpc.NameResolverProvider;
import io.grpc.NameResolverRegistry;
import io.grpc.Status;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.URI;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A static name resolver for gRPC's {@code ipv4:} (and {@code ipv6:})
 * targets, e.g. {@code ipv4:10.0.0.1:7400,10.0.0.2:7400}, which grpc-java's
 * DNS resolver does not understand: every listed replica is one address.
 */
public final class Ipv4NameResolverProvider extends NameResolverProvider {
  private static final AtomicBoolean REGISTERED = new AtomicBoolean();
  private final String scheme;

  public Ipv4NameResolverProvider(String scheme) {
    this.scheme = scheme;
  }

  /** Registers the ipv4: and ipv6: schemes with gRPC's default registry (once). */
  public static void register() {
    if (REGISTERED.compareAndSet(false, true)) {
      NameResolverRegistry.getDefaultRegistry().register(new Ipv4NameResolverProvider("ipv4"));
      NameResolverRegistry.getDefaultRegistry().register(new Ipv4NameResolverProvider("ipv6"));
    }
  }

  /** Parses the address list of an ipv4:/ipv6: target ("host:port,host:port"). */
  public static List<InetSocketAddress> parse(String list, boolean v6) {
    List<InetSocketAddress> out = new ArrayList<>();
    String s = list;
    while (s.startsWith("/")) {
      s = s.substring(1);
    }
    for (String part : s.split(",")) {
      part = part.trim();
      if (part.isEmpty()) {
        continue;
      }
      String host;
      String port;
      if (part.startsWith("[")) {
        int close = part.indexOf(']');
        if (close < 0 || close + 1 >= part.length() || part.charAt(close + 1) != ':') {
          throw new IllegalArgumentException("bad address " + part + " (want [host]:port)");
        }
        host = part.substring(1, close);
        port = part.substring(close + 2);
      } else {
        int colon = part.lastIndexOf(':');
        if (colon <= 0) {
          throw new IllegalArgumentException("bad address " + part + " (want host:port)");
        }
        host = part.substring(0, colon);
        port = part.substring(colon + 1);
      }
      int p;
      try {
        p = Integer.parseInt(port);
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("bad port in " + part);
      }
      if (p < 0 || p > 65535) {
        throw new IllegalArgumentException("bad port in " + part);
      }
      try {
        out.add(new InetSocketAddress(InetAddress.getByName(host), p));
      } catch (UnknownHostException e) {
        throw new IllegalArgumentException("bad address " + part + ": " + e.getMessage());
      }
    }
    if (out.isEmpty()) {
      throw new IllegalArgumentException("no address in " + list);
    }
    return out;
  }

  @Override
  protected boolean isAvailable() {
    return true;
  }

  @Override
  protected int priority() {
    return 5;
  }

  @Override
  public String getDefaultScheme() {
    return scheme;
  }

  @Override
  public NameResolver newNameResolver(URI targetUri, NameResolver.Args args) {
    if (!scheme.equals(targetUri.getScheme())) {
      return null;
    }
    String ssp = targetUri.getSchemeSpecificPart();
    List<InetSocketAddress> addrs = parse(ssp, scheme.equals("ipv6"));
    String first = ssp.replaceFirst("^/+", "").split(",")[0].trim();
    return new NameResolver() {
      @Override
      public String getServiceAuthority() {
        return first;
      }

      @Override
      public void start(Listener2 listener) {
        List<EquivalentAddressGroup> groups = new ArrayList<>();
        for (InetSocketAddress a : addrs) {
          groups.add(new EquivalentAddressGroup(Collections.<SocketAddress>singletonList(a)));
        }
        listener.onResult(ResolutionResult.newBuilder().setAddresses(groups)
            .setAttributes(Attributes.EMPTY).build());
      }

      @Override
      public void shutdown() {}
    };
  }

  static Status invalid(String msg) {
    return Status.INVALID_ARGUMENT.withDescription(msg);
  }
}
