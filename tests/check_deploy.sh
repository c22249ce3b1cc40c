#!/usr/bin/env bash
# Static checks of turnstile's deployment files -- there is no Docker engine or
# Kubernetes cluster on the build machines, so nothing here is run, but every
# cross-reference is checked:
#   - deploy/docker/Dockerfile: build stage installs exactly
#     deploy/debian-packages.txt (through deploy/local/install-deps.sh, like the
#     README set-up) and builds turnstiled + turnstile in Release; the runtime
#     stage (bookworm-slim) installs exactly the Debian packages that provide
#     the binaries' NEEDED libraries (objdump -p + dpkg -S on the built
#     binaries vs deploy/docker/runtime-packages.txt); numeric non-root USER;
#     EXPOSE == listen ports; ENV/CMD accepted by turnstiled; HEALTHCHECK runs
#     `turnstile ... health` on the gRPC port.
#   - docker-compose.yml: parses strictly; depends_on, mounts, build paths
#     exist; ports unique and on 127.0.0.1; ZOO_SERVERS == the ZooKeeper
#     services with matching ZOO_MY_ID; TURNSTILE_ZK == the ensemble at its
#     client port; Prometheus targets == services serving metrics; Grafana
#     provisioning paths == mounts; every TURNSTILE_* a turnstiled flag.
#   - deploy/k8s/: every manifest validates against the Kubernetes API schema
#     offline (npm kubernetes-models, pinned below) and has no field the
#     schema does not know; project rules (selectors, probes, grace period vs
#     drain timeout, env == turnstiled flags, anti-affinity, PDBs, ZooKeeper
#     StatefulSet, kustomization lists every manifest, scrape annotations).
#   - mutual TLS + authorization (all optional modes): deploy/local/make-dev-ca.sh
#     run in a temp dir and its certificates checked with openssl;
#     deploy/compose/mtls.override.yml merged over docker-compose.yml and
#     checked like it plus the TLS cross-references; deploy/k8s-mtls rendered
#     like kustomize (compared with `kubectl kustomize` if installed), checked
#     like deploy/k8s plus cert-manager objects and TLS cross-references; the
#     authorization policies against protos/turnstile/v1/authz.proto.
#   - README: the deployment sections name real services, ports and files.
# Then tests/check_deploy_mutations.py breaks a scratch copy of the files in
# ~165 ways and requires each break to be caught by the rule it targets.
#
# Usage: bash tests/check_deploy.sh TURNSTILED TURNSTILE WORK_DIR
#   WORK_DIR (under build/) holds the npm install of kubernetes-models; it is
#   installed once, later runs need no network.
#   DEPLOY_CHECK_ROOT=DIR checks a copy of the repository instead of this one.
# Needs: python3 + PyYAML (Debian python3-yaml), objdump (binutils), dpkg,
# openssl, node + npm (installed from Debian if missing); kubectl optional.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 TURNSTILED TURNSTILE WORK_DIR" >&2
  exit 2
fi
KUBERNETES_MODELS_VERSION=4.5.1
top=$(cd "$(dirname "$0")/.." && pwd)
root=${DEPLOY_CHECK_ROOT:-$top}
turnstiled=$(realpath "$1")
turnstile=$(realpath "$2")
mkdir -p "$3"
work=$(cd "$3" && pwd)
start=$SECONDS
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
if ! "$py" -c 'import yaml' 2>/dev/null; then
  echo "FAIL: $py has no PyYAML (install the Debian package python3-yaml)" >&2
  exit 1
fi
for tool in objdump dpkg ldd openssl; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found" >&2; exit 1; }
done
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "== node/npm missing: installing Debian's nodejs and npm"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends nodejs npm
fi

modules="$work/npm/node_modules"
have=$(node -e 'try { console.log(require(process.argv[1]).version) } catch (e) { console.log("") }' \
  "$modules/kubernetes-models/package.json")
if [ "$have" != "$KUBERNETES_MODELS_VERSION" ]; then
  echo "== npm install kubernetes-models@$KUBERNETES_MODELS_VERSION into $work/npm"
  # Three tries: a transient registry hiccup must not fail the suite.
  ok=0
  for attempt in 1 2 3; do
    if npm install --no-audit --no-fund --loglevel=error --prefix "$work/npm" \
        "kubernetes-models@$KUBERNETES_MODELS_VERSION" >/dev/null; then
      ok=1
      break
    fi
    echo "== npm install failed (attempt $attempt of 3)"
    sleep $((attempt * 5))
  done
  [ $ok -eq 1 ] ||
    { echo "FAIL: npm install kubernetes-models@$KUBERNETES_MODELS_VERSION (npm registry reachable?)"; exit 1; }
else
  echo "== kubernetes-models@$have already in $work/npm (no network needed)"
fi

echo "== static checks of $root (node $(node --version))"
rc=0
"$py" "$top/tests/check_deploy.py" --root "$root" --turnstiled "$turnstiled" --turnstile "$turnstile" \
  --node-modules "$modules" --facts-out "$work/binary-facts.json" || rc=1
echo "== mutations: each break must be caught"
"$py" "$top/tests/check_deploy_mutations.py" --root "$root" --facts "$work/binary-facts.json" \
  --node-modules "$modules" || rc=1
if [ $rc -ne 0 ]; then
  echo "FAIL: check_deploy ($((SECONDS - start))s)"
  exit 1
fi
echo "check_deploy: all deployment checks passed ($((SECONDS - start))s)"
