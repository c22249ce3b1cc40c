#!/usr/bin/python3
"""The Node.js client over TLS and mutual TLS (issue 22): the same
TURNSTILE_TLS_CA_FILE / TURNSTILE_TLS_CERT_FILE / TURNSTILE_TLS_KEY_FILE
variables as the CLI.

    node_tls_test.py --build BUILD_DIR

Makes a throw-away PKI (deploy/local/make-dev-ca.sh) in a temp dir, starts a
ZooKeeper and two turnstiled replicas (harness.py's), one with TLS and one
with mutual TLS, and runs client/node against them:
  - TLS: acquire, describe, release with only the CA; a plaintext client is
    refused (UNAVAILABLE);
  - mutual TLS: with the client certificate the hold's Describe identity is
    the certificate's URI SAN; without one the call fails.
Exit status 0 when all hold.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "conformance"))
import harness  # noqa: E402

IDENTITY = "spiffe://turnstile.local/client/demo"

SCRIPT = r"""
const { Client } = require(process.argv[1]);
const [target, lock] = process.argv.slice(2);
(async () => {
  const out = {};
  let client = null;
  try {
    client = new Client(target, { owner: 'node-tls', timeout: 5000 });
    const hold = await client.acquire(lock, { waitTimeout: 0 });
    out.token = hold.fencingToken.toString();
    const d = await client.describe(lock);
    out.holders = d.holders.map((h) => h.owner);
    out.identity = d.holders[0].identity;
    out.released = await hold.release();
  } catch (e) {
    out.error = e.codeName || String(e);
    out.message = e.message;
  }
  if (client) client.close();
  console.log(JSON.stringify(out));
})();
"""


def run_node(target, lock, env_tls):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_TLS_")}
    env.update(env_tls)
    out = subprocess.run([shutil.which("node") or "/usr/bin/node", "-e", SCRIPT,
                          os.path.join(TOP, "client", "node"), target, lock],
                         env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise harness.Failure("node exited %d: %s" % (out.returncode, out.stderr))
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(cond, what, got):
    if not cond:
        raise harness.Failure("%s: got %s" % (what, json.dumps(got)))
    print("ok   %s" % what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    tmp = tempfile.mkdtemp(prefix="turnstile-node-tls-")
    zk, replicas = None, []
    try:
        pki = os.path.join(tmp, "pki")
        subprocess.run(["bash", os.path.join(TOP, "deploy", "local", "make-dev-ca.sh"), pki],
                       check=True, stdout=subprocess.DEVNULL)
        ca = os.path.join(pki, "ca.crt")
        cert = os.path.join(pki, "client-turnstile.local-client-demo.crt")
        key = os.path.join(pki, "client-turnstile.local-client-demo.key")
        server_tls = ["--tls-cert-file", os.path.join(pki, "server.crt"),
                      "--tls-key-file", os.path.join(pki, "server.key")]
        zk = harness.ZooKeeper(tmp)
        root = "/node-tls-%d" % os.getpid()
        # Each is SERVING before use; its health is checked as a TLS
        # (and, for the second, a mutual TLS) client.
        tls_env = dict(os.environ, TURNSTILE_TLS_CA_FILE=ca)
        replicas.append(harness.Replica(build, zk, root, 0, server_tls, health_env=tls_env))
        replicas.append(harness.Replica(build, zk, root, 1,
                                        server_tls + ["--tls-client-ca-file", ca],
                                        health_env=dict(tls_env, TURNSTILE_TLS_CERT_FILE=cert,
                                                        TURNSTILE_TLS_KEY_FILE=key)))
        tls, mtls = replicas[0].address, replicas[1].address

        r = run_node(tls, "tls-lock", {"TURNSTILE_TLS_CA_FILE": ca})
        check("token" in r and r.get("holders") == ["node-tls"] and r.get("released") is True,
              "TLS (TURNSTILE_TLS_CA_FILE): acquire, describe, release", r)
        check(r.get("identity") == "", "TLS without a client certificate: no identity", r)
        r = run_node(tls, "tls-lock", {})
        check(r.get("error") == "UNAVAILABLE", "a plaintext client is refused by a TLS replica", r)

        r = run_node(mtls, "mtls-lock", {"TURNSTILE_TLS_CA_FILE": ca,
                                         "TURNSTILE_TLS_CERT_FILE": cert,
                                         "TURNSTILE_TLS_KEY_FILE": key})
        check("token" in r and r.get("released") is True,
              "mutual TLS (CA, cert and key variables): acquire, describe, release", r)
        check(r.get("identity") == IDENTITY,
              "mutual TLS: Describe shows the client certificate's identity", r)
        r = run_node(mtls, "mtls-lock", {"TURNSTILE_TLS_CA_FILE": ca})
        check(r.get("error") in ("UNAVAILABLE", "UNAUTHENTICATED"),
              "mutual TLS without a client certificate fails", r)
        r = run_node(mtls, "mtls-lock", {"TURNSTILE_TLS_CA_FILE": ca,
                                         "TURNSTILE_TLS_CERT_FILE": cert})
        check(r.get("error") == "INVALID_ARGUMENT" and "go together" in r.get("message", ""),
              "a certificate without its key is a clear error", r)
    except harness.Failure as f:
        print("FAIL node_tls: %s" % f)
        return 1
    finally:
        for rep in replicas:
            rep.stop()
        if zk is not None:
            zk.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS node_tls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
