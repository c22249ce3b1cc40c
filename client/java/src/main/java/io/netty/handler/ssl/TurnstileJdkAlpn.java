package io.netty.handler.ssl;

import java.io.File;
import javax.net.ssl.SSLException;

/**
 * ALPN ("h2") with the JDK's own TLS (Java 9+) for Debian's netty 4.1.48,
 * whose JdkSslContext was built without its ALPN negotiators ("JDK provider
 * does not support ALPN protocol") and which has no netty-tcnative library
 * under the name netty looks for. It wraps each SSLEngine in netty's
 * Java9SslEngine (SSLParameters.setApplicationProtocols), as upstream netty
 * does. Used by io.turnstile.client only when GrpcSslContexts fails; it
 * lives in netty's package because those classes are package-private.
 */
public final class TurnstileJdkAlpn {
  private TurnstileJdkAlpn() {}

  /** A client context trusting caFile, presenting certFile/keyFile (may be null). */
  public static SslContext forClient(File caFile, File certFile, File keyFile) throws SSLException {
    SslContextBuilder b = SslContextBuilder.forClient().sslProvider(SslProvider.JDK)
        .trustManager(caFile);
    if (certFile != null) {
      b.keyManager(certFile, keyFile);
    }
    JdkSslContext base = (JdkSslContext) b.build();
    JdkApplicationProtocolNegotiator.SslEngineWrapperFactory wrap =
        (engine, apn, isServer) -> new Java9SslEngine(engine, apn, isServer);
    JdkApplicationProtocolNegotiator apn = new JdkBaseApplicationProtocolNegotiator(wrap,
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTOR_FACTORY,
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTION_LISTENER_FACTORY, "h2");
    return new JdkSslContext(base.context(), true, base.cipherSuites(),
        IdentityCipherSuiteFilter.INSTANCE, apn, ClientAuth.NONE, null, false);
  }
}
