#!/usr/bin/env bash
# A throw-away PKI for trying turnstile's mutual TLS locally (the compose
# override deploy/compose/mtls.override.yml uses it). Never use it in
# production: the CA key sits next to the certificates. On Kubernetes use
# cert-manager instead (deploy/k8s-mtls/).
#
#   bash deploy/local/make-dev-ca.sh deploy/local/dev-pki
#   bash deploy/local/make-dev-ca.sh deploy/local/dev-pki \
#       spiffe://turnstile.local/client/demo spiffe://turnstile.local/ops/admin
#
# deploy/local/dev-pki/ is in .gitignore and Dockerfile.dockerignore: no key is
# ever committed or sent to a Docker build. What OUT_DIR gets (EC P-256 keys,
# mode 600; certificates signed with SHA-256):
#   ca.crt, ca.key          the CA (CN "turnstile dev CA", 10 years)
#   server.crt, server.key  the replicas' certificate: extendedKeyUsage
#                           serverAuth, SANs DNS:localhost, DNS:turnstile,
#                           DNS:turnstile-1, DNS:turnstile-2 (the compose
#                           replicas), IP:127.0.0.1, plus any --server-dns NAME
#   client-SLUG.crt/.key    one client certificate per CLIENT_IDENTITY
#                           (default spiffe://turnstile.local/client/demo):
#                           extendedKeyUsage clientAuth, URI SAN = the identity
#                           (what turnstiled's --authz-file rules match), CN =
#                           its last path segment. SLUG is the identity without
#                           its "scheme://", every run of other characters than
#                           A-Z a-z 0-9 . _ - turned into one "-":
#                             spiffe://turnstile.local/client/demo
#                             -> client-turnstile.local-client-demo.crt
#   client-turnstile.local-replica-healthcheck.crt/.key
#                           always made: identity
#                           spiffe://turnstile.local/replica/healthcheck, the
#                           client certificate of the replicas' own health
#                           check (the health service is not subject to the
#                           policy; the policy grants this identity nothing)
#
# Idempotent: an existing CA is kept (never overwritten) and certificates that
# already exist, chain to it and carry the wanted names are kept; missing ones
# are issued, changed ones re-issued. --force deletes the CA and every
# certificate in OUT_DIR first and starts over (all clients need the new ones).
#
# Leaf certificates last 825 days (--days N), the CA 3650 days.
set -euo pipefail

HEALTHCHECK_IDENTITY="spiffe://turnstile.local/replica/healthcheck"
DEFAULT_IDENTITY="spiffe://turnstile.local/client/demo"
SERVER_DNS=(localhost turnstile turnstile-1 turnstile-2)
SERVER_IPS=(127.0.0.1)
CA_CN="turnstile dev CA"
CA_DAYS=3650

usage() {
  cat <<EOF
usage: $0 [--force] [--days N] [--server-dns NAME]... OUT_DIR [CLIENT_IDENTITY ...]
  OUT_DIR          where the CA and certificates go (conventionally deploy/local/dev-pki)
  CLIENT_IDENTITY  a URI (e.g. a SPIFFE ID) for one client certificate each;
                   default $DEFAULT_IDENTITY
  --force          replace an existing CA and re-issue every certificate
  --days N         validity of the server and client certificates (default 825)
  --server-dns N   one more DNS name for the server certificate (repeatable)
EOF
}

die() { echo "make-dev-ca: $*" >&2; exit 1; }

force=0
days=825
positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1; shift ;;
    --days) [ $# -ge 2 ] || die "--days needs a value"; days=$2; shift 2 ;;
    --days=*) days=${1#--days=}; shift ;;
    --server-dns) [ $# -ge 2 ] || die "--server-dns needs a value"; SERVER_DNS+=("$2"); shift 2 ;;
    --server-dns=*) SERVER_DNS+=("${1#--server-dns=}"); shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; positional+=("$@"); break ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) positional+=("$1"); shift ;;
  esac
done
[ ${#positional[@]} -ge 1 ] || { usage >&2; exit 2; }
out=${positional[0]}
identities=("${positional[@]:1}")
[ ${#identities[@]} -gt 0 ] || identities=("$DEFAULT_IDENTITY")
[[ "$days" =~ ^[1-9][0-9]*$ ]] || die "--days must be a positive number of days, got '$days'"
for n in "${SERVER_DNS[@]}"; do
  [[ "$n" =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]] || die "not a DNS name: '$n'"
done
command -v openssl >/dev/null || die "openssl not found (Debian package openssl)"

slug_of() {  # spiffe://turnstile.local/client/demo -> turnstile.local-client-demo
  local s=${1#*://}
  s=$(printf '%s' "$s" | sed -e 's/[^A-Za-z0-9._-]\{1,\}/-/g' -e 's/^-*//' -e 's/-*$//')
  printf '%s' "$s"
}

# Validate every identity before writing anything.
all_ids=("$HEALTHCHECK_IDENTITY")
for id in "${identities[@]}"; do
  [ "$id" = "$HEALTHCHECK_IDENTITY" ] || all_ids+=("$id")
done
declare -A slug_owner=()
for id in "${all_ids[@]}"; do
  [[ "$id" =~ ^[A-Za-z][A-Za-z0-9+.-]*://[^[:space:],]+$ ]] ||
    die "identity '$id' is not a URI like spiffe://trust.domain/path (no spaces or commas)"
  cn=${id%/}
  cn=${cn##*/}
  [[ "$cn" =~ ^[A-Za-z0-9._@-]{1,64}$ ]] ||
    die "identity '$id': its last path segment '$cn' (the CN) must be 1..64 of A-Z a-z 0-9 . _ @ -"
  slug=$(slug_of "$id")
  [ -n "$slug" ] || die "identity '$id' gives an empty file name"
  if [ -n "${slug_owner[$slug]:-}" ] && [ "${slug_owner[$slug]}" != "$id" ]; then
    die "identities '${slug_owner[$slug]}' and '$id' would share the files client-$slug.*"
  fi
  slug_owner[$slug]=$id
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Warn when the keys would land in a git work tree without being ignored.
if top=$(git -C "$out" rev-parse --show-toplevel 2>/dev/null); then
  if ! git -C "$top" check-ignore -q "$out/ca.key" 2>/dev/null; then
    echo "make-dev-ca: WARNING: $out is inside the git work tree $top and not ignored; never commit its keys" >&2
  fi
fi

if [ $force -eq 1 ]; then
  shopt -s nullglob
  old=("$out"/ca.crt "$out"/ca.key "$out"/server.crt "$out"/server.key "$out"/client-*.crt "$out"/client-*.key)
  shopt -u nullglob
  existing=()
  for f in "${old[@]}"; do [ -e "$f" ] && existing+=("$f"); done
  if [ ${#existing[@]} -gt 0 ]; then
    rm -f -- "${existing[@]}"
    echo "--force: removed ${#existing[@]} old files from $out"
  fi
fi

new_key() {  # new_key PATH: EC P-256, mode 600
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.tmp" 2>"$tmp/openssl.log" ||
    { cat "$tmp/openssl.log" >&2; die "openssl genpkey failed"; }
  chmod 600 "$1.tmp"
  mv -f "$1.tmp" "$1"
}

cat > "$tmp/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca_ext]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF

# ---- the CA: kept if present, never overwritten without --force -------------
if [ -e "$out/ca.crt" ] || [ -e "$out/ca.key" ]; then
  if [ ! -e "$out/ca.crt" ] || [ ! -e "$out/ca.key" ]; then
    die "$out has only one of ca.crt and ca.key; rerun with --force to start a new CA"
  fi
  [ "$(openssl x509 -in "$out/ca.crt" -noout -pubkey)" = "$(openssl pkey -in "$out/ca.key" -pubout)" ] ||
    die "$out/ca.key does not belong to $out/ca.crt; rerun with --force to start a new CA"
  echo "kept  ca.crt, ca.key  (existing CA: $(openssl x509 -in "$out/ca.crt" -noout -subject); --force replaces it)"
else
  new_key "$out/ca.key"
  openssl req -x509 -new -key "$out/ca.key" -config "$tmp/openssl.cnf" -extensions ca_ext \
    -subj "/CN=$CA_CN" -days "$CA_DAYS" -sha256 -out "$tmp/ca.crt" 2>"$tmp/openssl.log" ||
    { cat "$tmp/openssl.log" >&2; die "openssl req (CA) failed"; }
  chmod 644 "$tmp/ca.crt"
  mv -f "$tmp/ca.crt" "$out/ca.crt"
  echo "made  ca.crt, ca.key  (CN=$CA_CN, $CA_DAYS days)"
fi

san_set() {  # the SANs of a certificate as sorted "DNS:x" / "IP:x" / "URI:x" lines
  openssl x509 -in "$1" -noout -ext subjectAltName 2>/dev/null | tail -n +2 |
    tr ',' '\n' | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/^IP Address:/IP:/' |
    grep -v '^$' | LC_ALL=C sort
}

# issue NAME CN EKU SAN: NAME.crt/NAME.key signed by the CA (kept when current)
issue() {
  local name=$1 cn=$2 eku=$3 san=$4 crt="$out/$1.crt" key="$out/$1.key" want why=""
  want=$(printf '%s\n' "$san" | tr ',' '\n' | LC_ALL=C sort)
  if [ -e "$crt" ] && [ -e "$key" ]; then
    if ! openssl verify -CAfile "$out/ca.crt" "$crt" >/dev/null 2>&1; then
      die "$crt does not chain to $out/ca.crt (or has expired); rerun with --force"
    elif [ "$(openssl x509 -in "$crt" -noout -pubkey)" != "$(openssl pkey -in "$key" -pubout)" ]; then
      die "$key does not belong to $crt; rerun with --force"
    elif [ "$(san_set "$crt")" != "$want" ]; then
      why="re-issued (names changed)"
    else
      echo "kept  $name.crt, $name.key  ($(printf '%s' "$want" | paste -sd' '))"
      return
    fi
  fi
  [ -e "$key" ] || new_key "$key"
  {
    cat "$tmp/openssl.cnf"
    printf '[leaf_ext]\nbasicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\n'
    printf 'extendedKeyUsage = %s\nsubjectAltName = %s\n' "$eku" "$san"
    printf 'subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n'
  } > "$tmp/leaf.cnf"
  openssl req -new -key "$key" -config "$tmp/leaf.cnf" -subj "/CN=$cn" -out "$tmp/$name.csr" 2>"$tmp/openssl.log" ||
    { cat "$tmp/openssl.log" >&2; die "openssl req ($name) failed"; }
  openssl x509 -req -in "$tmp/$name.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
    -extfile "$tmp/leaf.cnf" -extensions leaf_ext -out "$tmp/$name.crt" 2>"$tmp/openssl.log" ||
    { cat "$tmp/openssl.log" >&2; die "openssl x509 ($name) failed"; }
  chmod 644 "$tmp/$name.crt"
  mv -f "$tmp/$name.crt" "$crt"
  echo "${why:-made}  $name.crt, $name.key  (CN=$cn, $eku, $(printf '%s' "$want" | paste -sd' '), $days days)"
}

server_san=""
for n in "${SERVER_DNS[@]}"; do server_san+="${server_san:+,}DNS:$n"; done
for ip in "${SERVER_IPS[@]}"; do server_san+=",IP:$ip"; done
issue server turnstile serverAuth "$server_san"

for id in "${all_ids[@]}"; do
  cn=${id%/}
  cn=${cn##*/}
  issue "client-$(slug_of "$id")" "$cn" clientAuth "URI:$id"
done

echo "PKI in $out (CA key: $out/ca.key -- keep it out of images and repositories)"
