#!/usr/bin/python3
"""Proves that tests/check_deploy.py catches breaks: each mutation below edits
one file in a scratch copy of the repository (never the real files), runs every
check on the copy, and requires a failure whose message names the broken rule.
The unmutated copy must pass first, so a failure is the mutation's doing.

Usage: check_deploy_mutations.py --root REPO --facts FACTS.json --node-modules DIR
(FACTS.json: what check_deploy.py --facts-out wrote from the built binaries.)
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_deploy  # noqa: E402

C, DF, DI, RL = "docker-compose.yml", "deploy/docker/Dockerfile", "deploy/docker/Dockerfile.dockerignore", \
    "deploy/docker/runtime-packages.txt"
K = "deploy/k8s/"
DEP, CM, STS = K + "turnstile-deployment.yaml", K + "turnstile-configmap.yaml", K + "zookeeper-statefulset.yaml"
KUST = K + "kustomization.yaml"
# Issue 13 (mutual TLS + authorization).
CO, CP, MC = "deploy/compose/mtls.override.yml", "deploy/compose/authz/policy.json", "deploy/local/make-dev-ca.sh"
KM = "deploy/k8s-mtls/"
KC, KD, KK, KP = KM + "certificates.yaml", KM + "deployment-mtls.yaml", KM + "kustomization.yaml", KM + "authz-policy.json"

# (what, file, old text, new text, a substring of the failure it must cause).
# The old text is replaced once (its first occurrence) unless the name ends with "(all)".
MUTATIONS = [
    # --- docker-compose.yml (Must show 1) ---
    ("compose: depends_on names a missing service", C, "      zk3:\n        condition", "      zk4:\n        condition",
     "depends_on zk4 is a service"),
    ("compose: mounted directory missing", C, "./deploy/prometheus:/etc/prometheus:ro",
     "./deploy/prometheus-old:/etc/prometheus:ro", "mounted ./deploy/prometheus-old exists"),
    ("compose: mounted file outside the repo", C, "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro",
     "/etc:/var/lib/grafana/dashboards:ro", "mounted /etc exists in the repository"),
    ("compose: port published on all interfaces", C, '"127.0.0.1:9090:9090"', '"9090:9090"',
     "published on 127.0.0.1 only"),
    ("compose: duplicate host port", C, "127.0.0.1:7401:7400", "127.0.0.1:7400:7400", "is unique"),
    ("compose: published port the service does not serve", C, "127.0.0.1:3000:3000", "127.0.0.1:3000:3001",
     "published container port 3001"),
    ("compose: ZOO_SERVERS names a host that is no service (all)", C, "server.3=zk3:", "server.3=zookeeper3:",
     "ZOO_SERVERS lists exactly the ZooKeeper services"),
    ("compose: ZOO_MY_ID does not match the server list", C, 'ZOO_MY_ID: "3"', 'ZOO_MY_ID: "2"',
     "ZOO_MY_ID=2 is its own server.N"),
    ("compose: one member's ZOO_SERVERS differs", C,
     "ZOO_MY_ID: \"2\"\n      ZOO_SERVERS: \"server.1=zk1:2888:3888;2181",
     "ZOO_MY_ID: \"2\"\n      ZOO_SERVERS: \"server.1=zk1:2889:3888;2181", "same ZOO_SERVERS"),
    ("compose: ZooKeeper metrics provider off", C,
     "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider metricsProvider.httpPort=7000\"\n      ZOO_4LW_COMMANDS_WHITELIST: \"srvr,ruok,mntr\"\n      ZOO_ADMINSERVER_ENABLED: \"false\"\n      ZOO_AUTOPURGE_PURGEINTERVAL: \"1\"\n    healthcheck:\n      # ",
     "metricsProvider.httpPort=7000\"\n      ZOO_4LW_COMMANDS_WHITELIST: \"srvr,ruok,mntr\"\n      ZOO_ADMINSERVER_ENABLED: \"false\"\n      ZOO_AUTOPURGE_PURGEINTERVAL: \"1\"\n    healthcheck:\n      # ",
     "zk1: Prometheus metrics provider on"),
    ("compose: ZooKeeper healthcheck uses a command not whitelisted", C, 'ZOO_4LW_COMMANDS_WHITELIST: "srvr,ruok,mntr"',
     'ZOO_4LW_COMMANDS_WHITELIST: "ruok,mntr"', "healthcheck asks whitelisted four-letter words"),
    ("compose: TURNSTILE_ZK misses a member", C, '"zk1:2181,zk2:2181,zk3:2181"', '"zk1:2181,zk2:2181"',
     "names exactly the ZooKeeper services"),
    ("compose: TURNSTILE_ZK uses a wrong port", C, '"zk1:2181,zk2:2181,zk3:2181"', '"zk1:2182,zk2:2181,zk3:2181"',
     "uses each member's client port"),
    ("compose: Prometheus target is no service", "deploy/prometheus/prometheus.yml", "- turnstile-2:9464",
     "- turnstile-3:9464", "job 'turnstile' targets"),
    ("compose: ZooKeeper metrics port differs from the Prometheus target", C, "metricsProvider.httpPort=7000",
     "metricsProvider.httpPort=7001", "job 'zookeeper' targets"),
    ("compose: replica metrics port differs from the Prometheus target", C, "TURNSTILE_LOG_LEVEL: info\n    ports:\n      - \"127.0.0.1:7400:7400\"",
     "TURNSTILE_LOG_LEVEL: info\n      TURNSTILE_METRICS_LISTEN: 0.0.0.0:9465\n    ports:\n      - \"127.0.0.1:7400:7400\"",
     "job 'turnstile' targets"),
    ("compose: rule file not mounted", "deploy/prometheus/prometheus.yml", "  - turnstile-rules.yml",
     "  - rules/turnstile-rules.yml", "rule file rules/turnstile-rules.yml is mounted"),
    ("grafana: dashboard provider path is not the mount", "deploy/grafana/provisioning/dashboards/turnstile.yml",
     "path: /var/lib/grafana/dashboards", "path: /etc/grafana/dashboards", "dashboard provider path"),
    ("grafana: datasource URL is no service", "deploy/grafana/provisioning/datasources/prometheus.yml",
     "url: http://prometheus:9090", "url: http://prom:9090", "is the Prometheus service"),
    ("grafana: provisioning not mounted", C,
     "./deploy/grafana/provisioning/datasources:/etc/grafana/provisioning/datasources:ro",
     "./deploy/grafana/provisioning/datasources:/etc/grafana/datasources:ro",
     "provisioning/datasources is mounted"),
    ("compose: misspelt service key", C, "    healthcheck:\n      test: [\"CMD\", \"turnstile\"",
     "    healtcheck:\n      test: [\"CMD\", \"turnstile\"", "only known service keys"),
    ("compose: duplicate YAML key", C, "      TURNSTILE_REPLICA_ID: turnstile-1\n",
     "      TURNSTILE_REPLICA_ID: turnstile-1\n      TURNSTILE_REPLICA_ID: turnstile-2\n", "duplicate key"),
    ("compose: variable that is no turnstiled flag", C, "TURNSTILE_LOG_LEVEL: info", "TURNSTILE_LOGLEVEL: info",
     "not a turnstiled flag"),
    ("compose: value turnstiled rejects", C, "TURNSTILE_DRAIN_TIMEOUT: 10s", "TURNSTILE_DRAIN_TIMEOUT: 10 seconds",
     "turnstiled accepts"),
    ("compose: log level turnstiled does not know", C, "TURNSTILE_LOG_LEVEL: info", "TURNSTILE_LOG_LEVEL: verbose",
     "TURNSTILE_LOG_LEVEL=verbose"),
    ("compose: stop grace period shorter than the drain", C, "stop_grace_period: 30s", "stop_grace_period: 12s",
     "stop_grace_period 12s exceeds"),
    ("compose: healthcheck is not `turnstile health`", C, '"--rpc-timeout", "3s", "health"]',
     '"--rpc-timeout", "3s", "list"]', "command is `health`"),
    ("compose: healthcheck asks the wrong port", C, '"--server", "127.0.0.1:7400"', '"--server", "127.0.0.1:7401"',
     "gRPC listen port 7400"),
    ("compose: unpinned Grafana image", C, "grafana/grafana:10.4.3", "grafana/grafana:latest", "image pinned"),
    ("compose: ZooKeeper outside the 3.8 line (all)", C, "zookeeper:3.8.4", "zookeeper:3.9.2", "official zookeeper image, 3.8 line"),
    # --- Dockerfile (Must show 3) ---
    ("dockerfile: build stage installs a package outside the list", DF, "COPY CMakeLists.txt CMakeLists.txt",
     "RUN apt-get update && apt-get install -y --no-install-recommends curl\nCOPY CMakeLists.txt CMakeLists.txt",
     "installs no package outside the list"),
    ("dockerfile: build stage keeps its own package list", DF, "RUN bash deploy/local/install-deps.sh && rm -rf /var/lib/apt/lists/*",
     "RUN apt-get update && apt-get install -y cmake g++ libgrpc++-dev", "runs install-deps.sh"),
    ("dockerfile: list copied where install-deps.sh does not look", DF,
     "COPY deploy/debian-packages.txt deploy/debian-packages.txt", "COPY deploy/debian-packages.txt packages.txt",
     "finds the list where it looks"),
    ("dockerfile: debug build", DF, "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_BUILD_TYPE=Debug", "Release build"),
    ("dockerfile: builds every target", DF, "--target turnstiled turnstile", "--target all", "exactly the targets"),
    ("dockerfile: a CMake subdirectory is not copied", DF, "COPY tests tests\n", "", "every add_subdirectory"),
    ("dockerfile: ignore file drops a copied directory", DI, "deploy/prometheus\n", "deploy/prometheus\nprotos\n",
     "COPY source protos is in the build context"),
    ("dockerfile: ignore file sends build/", DI, "\nbuild\n", "\n", "excludes build/server/turnstiled"),
    ("dockerfile: runtime list misses a library package", RL, "libzookeeper-st2\n", "",
     "runtime list has every package"),
    ("dockerfile: runtime list has an unneeded package", RL, "libc6\n", "libc6\ncurl\n",
     "no package that provides no NEEDED"),
    ("dockerfile: runtime stage installs an extra package", DF,
     "| xargs apt-get install -y -q --no-install-recommends", "| xargs apt-get install -y -q --no-install-recommends curl",
     "names no package outside the list"),
    ("dockerfile: runtime stage not slim", DF, "FROM debian:bookworm-slim AS runtime", "FROM debian:bookworm AS runtime",
     "debian:bookworm-slim"),
    ("dockerfile: build stage not bookworm", DF, "FROM debian:bookworm AS build", "FROM debian:trixie AS build",
     "every stage is Debian bookworm"),
    ("dockerfile: named USER", DF, "USER 10001:10001", "USER turnstile", "numeric non-root uid"),
    ("dockerfile: root USER", DF, "USER 10001:10001", "USER 0", "numeric non-root uid"),
    ("dockerfile: EXPOSE differs from the listen ports", DF, "EXPOSE 7400 9464", "EXPOSE 7400 9465", "EXPOSE"),
    ("dockerfile: ENV that is no flag", DF, "TURNSTILE_METRICS_LISTEN=0.0.0.0:9464", "TURNSTILE_METRICS_ADDR=0.0.0.0:9464",
     "not a turnstiled flag"),
    ("dockerfile: listens on loopback only", DF, "TURNSTILE_LISTEN=0.0.0.0:7400", "TURNSTILE_LISTEN=127.0.0.1:7400",
     "--listen listens on all interfaces"),
    ("dockerfile: CMD with a flag turnstiled lacks", DF, 'ENTRYPOINT ["/usr/local/bin/turnstiled"]',
     'ENTRYPOINT ["/usr/local/bin/turnstiled"]\nCMD ["--listen-address", "0.0.0.0:7400"]', "turnstiled accepts"),
    ("dockerfile: shell-form ENTRYPOINT", DF, 'ENTRYPOINT ["/usr/local/bin/turnstiled"]',
     "ENTRYPOINT /usr/local/bin/turnstiled", "exec form"),
    ("dockerfile: HEALTHCHECK is not `turnstile health`", DF, '"3s", "health"]', '"3s", "describe", "x"]',
     "command is `health`"),
    ("dockerfile: HEALTHCHECK with a flag the CLI lacks", DF, '"--rpc-timeout", "3s", "health"]',
     '"--rpc-deadline", "3s", "health"]', "accepts its global flags"),
    ("dockerfile: HEALTHCHECK asks the wrong port", DF, '"--server", "127.0.0.1:7400"', '"--server", "127.0.0.1:7500"',
     "gRPC listen port 7400"),
    ("dockerfile: binary copied from the wrong build path", DF, "/src/build/client/turnstile ",
     "/src/build/turnstile ", "gets turnstile from the build stage"),
    # --- Kubernetes (Must show 2) ---
    ("k8s: wrong field type", DEP, "replicas: 3", "replicas: three", "valid against kubernetes-models/apps/v1/Deployment"),
    ("k8s: required field missing", K + "turnstile-service.yaml", "    - name: grpc\n      port: 7400\n",
     "    - name: grpc\n", "valid against kubernetes-models/v1/Service"),
    ("k8s: misspelt field", DEP, "imagePullPolicy: IfNotPresent", "imagePullPolicyy: IfNotPresent",
     "unknown: spec.template.spec.containers[0].imagePullPolicyy"),
    ("k8s: misspelt nested field", STS, "    type: RollingUpdate", "    kind: RollingUpdate",
     "unknown: spec.updateStrategy.kind"),
    ("k8s: unknown apiVersion", K + "turnstile-pdb.yaml", "apiVersion: policy/v1", "apiVersion: policy/v1beta2",
     "kubernetes-models has no policy/v1beta2"),
    ("k8s: duplicate YAML key", K + "zookeeper-pdb.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 1\n  maxUnavailable: 2\n",
     "duplicate key"),
    ("k8s: Deployment replicas", DEP, "replicas: 3", "replicas: 2", "3 replicas (got 2)"),
    ("k8s: Deployment selector does not match its pods", DEP,
     "  selector:\n    matchLabels:\n      app.kubernetes.io/name: turnstile\n      app.kubernetes.io/component: server",
     "  selector:\n    matchLabels:\n      app.kubernetes.io/name: turnstile\n      app.kubernetes.io/component: api",
     "Deployment/turnstile: selector matches its pod template labels"),
    ("k8s: readiness probe on the metrics port", DEP, "readinessProbe:\n            grpc:\n              port: 7400",
     "readinessProbe:\n            grpc:\n              port: 9464", "readinessProbe is a native gRPC probe"),
    ("k8s: liveness probe not gRPC", DEP, "livenessProbe:\n            grpc:\n              port: 7400",
     "livenessProbe:\n            tcpSocket:\n              port: 7400", "livenessProbe is a native gRPC probe"),
    ("k8s: readiness probe asks a named service", DEP, "readinessProbe:\n            grpc:\n              port: 7400",
     "readinessProbe:\n            grpc:\n              port: 7400\n              service: liveness", "overall health"),
    ("k8s: liveness probe asks the overall health (restarts on ZooKeeper outages)", DEP,
     "              service: liveness\n", "", "livenessProbe asks the service turnstiled keeps SERVING"),
    ("k8s: liveness probe asks a service turnstiled does not serve", DEP,
     "              service: liveness\n", "              service: alive\n", "livenessProbe asks the service"),
    ("k8s: grace period shorter than the drain", DEP, "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 12",
     "terminationGracePeriodSeconds 12s exceeds"),
    ("k8s: drain timeout raised above the grace period", CM, 'TURNSTILE_DRAIN_TIMEOUT: "10s"', 'TURNSTILE_DRAIN_TIMEOUT: "1m"',
     "exceeds drain timeout 60s"),
    ("k8s: ConfigMap key that is no flag", CM, '  TURNSTILE_LOG_LEVEL: "info"', '  TURNSTILE_LOG_LEVEL: "info"\n  TURNSTILE_ZK_HOSTS: "x:2181"',
     "TURNSTILE_ZK_HOSTS"),
    ("k8s: ConfigMap key outside TURNSTILE_*", CM, '  TURNSTILE_LOG_LEVEL: "info"', '  TURNSTILE_LOG_LEVEL: "info"\n  GRPC_VERBOSITY: "debug"',
     "every key is TURNSTILE_*"),
    ("k8s: ConfigMap value turnstiled rejects", CM, 'TURNSTILE_METRICS_MAX_LOCKS: "100"', 'TURNSTILE_METRICS_MAX_LOCKS: "many"',
     "turnstiled accepts"),
    ("k8s: Deployment env that is no flag", DEP, "- name: TURNSTILE_REPLICA_ID", "- name: TURNSTILE_REPLICA_NAME",
     "TURNSTILE_REPLICA_NAME"),
    ("k8s: envFrom names a missing ConfigMap", DEP, "name: turnstile-config", "name: turnstile-settings",
     "envFrom ConfigMap turnstile-settings is a manifest"),
    ("k8s: listen port is no containerPort", CM, 'TURNSTILE_LISTEN: "0.0.0.0:7400"', 'TURNSTILE_LISTEN: "0.0.0.0:7500"',
     "listen ports are containerPorts"),
    ("k8s: service links on", DEP, "enableServiceLinks: false", "enableServiceLinks: true", "enableServiceLinks false"),
    ("k8s: writable root filesystem", DEP, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false",
     "readOnlyRootFilesystem"),
    ("k8s: may run as root (all)", DEP, "runAsNonRoot: true", "runAsNonRoot: false", ": runAsNonRoot"),
    ("k8s: privilege escalation", DEP, "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true",
     "allowPrivilegeEscalation false"),
    ("k8s: capabilities kept", DEP, "                - ALL", "                - NET_RAW", "drops ALL capabilities"),
    ("k8s: runAsUser is not the image's (all)", DEP, "runAsUser: 10001", "runAsUser: 10002", "runAsUser 10002 is the image's USER"),
    ("k8s: no memory limit", DEP, '              cpu: "1"\n              memory: 512Mi', '              cpu: "1"',
     "cpu and memory requests and limits set"),
    ("k8s: anti-affinity selects other pods", DEP,
     "labelSelector:\n                  matchLabels:\n                    app.kubernetes.io/name: turnstile",
     "labelSelector:\n                  matchLabels:\n                    app.kubernetes.io/name: turnstiled",
     "anti-affinity term selects its own pods"),
    ("k8s: no anti-affinity", DEP, "      affinity:\n        podAntiAffinity:", "      affinity:\n        podAffinity:",
     "has pod anti-affinity"),
    ("k8s: scrape annotation names another port", DEP, 'prometheus.io/port: "9464"', 'prometheus.io/port: "9465"',
     "prometheus.io/port 9465 == metrics containerPort"),
    ("k8s: scrape annotation missing", DEP, 'prometheus.io/scrape: "true"', 'prometheus.io/scrape: "false"',
     "prometheus.io/scrape"),
    ("k8s: Service selects no pods", K + "turnstile-service.yaml",
     "  selector:\n    app.kubernetes.io/name: turnstile\n    app.kubernetes.io/component: server",
     "  selector:\n    app.kubernetes.io/name: turnstile\n    app.kubernetes.io/component: api",
     "Service/turnstile: selector matches the pods of exactly one workload"),
    ("k8s: Service targetPort is no container port", K + "turnstile-headless-service.yaml", "targetPort: grpc",
     "targetPort: grpcs", "targetPort grpcs is a container port"),
    ("k8s: no headless Service", K + "turnstile-headless-service.yaml", "  clusterIP: None\n", "",
     "a headless Service"),
    ("k8s: PDB selects no pods", K + "turnstile-pdb.yaml",
     "    matchLabels:\n      app.kubernetes.io/name: turnstile\n      app.kubernetes.io/component: server",
     "    matchLabels:\n      app.kubernetes.io/name: turnstile\n      app.kubernetes.io/component: api",
     "PodDisruptionBudget/turnstile: selects the pods"),
    ("k8s: turnstile PDB blocks every drain", K + "turnstile-pdb.yaml", "maxUnavailable: 1", "maxUnavailable: 0",
     "PDB lets drains proceed"),
    ("k8s: ZooKeeper PDB allows two down", K + "zookeeper-pdb.yaml", "maxUnavailable: 1", "maxUnavailable: 2",
     "PodDisruptionBudget maxUnavailable 1"),
    ("k8s: ZooKeeper anti-affinity selects other pods", STS,
     "              labelSelector:\n                matchLabels:\n                  app.kubernetes.io/name: zookeeper",
     "              labelSelector:\n                matchLabels:\n                  app.kubernetes.io/name: zk",
     "required anti-affinity selects its own pods"),
    ("k8s: ZooKeeper anti-affinity only preferred", STS,
     "          requiredDuringSchedulingIgnoredDuringExecution:\n            - topologyKey: kubernetes.io/hostname\n              labelSelector:\n                matchLabels:\n                  app.kubernetes.io/name: zookeeper\n                  app.kubernetes.io/component: coordination",
     "          preferredDuringSchedulingIgnoredDuringExecution:\n            - weight: 100\n              podAffinityTerm:\n                topologyKey: kubernetes.io/hostname\n                labelSelector:\n                  matchLabels:\n                    app.kubernetes.io/name: zookeeper\n                    app.kubernetes.io/component: coordination",
     "required anti-affinity selects its own pods"),
    ("k8s: StatefulSet serviceName is no Service", STS, "serviceName: zookeeper-headless", "serviceName: zk-headless",
     "serviceName zk-headless is a Service"),
    ("k8s: governing Service hides not-ready members", K + "zookeeper-headless-service.yaml",
     "publishNotReadyAddresses: true", "publishNotReadyAddresses: false", "publishes not-ready members"),
    ("k8s: ZooKeeper replicas", STS, "  replicas: 3\n", "  replicas: 5\n", "StatefulSet/zookeeper: 3 replicas (got 5)"),
    ("k8s: ZooKeeper OrderedReady", STS, "podManagementPolicy: Parallel", "podManagementPolicy: OrderedReady",
     "podManagementPolicy Parallel"),
    ("k8s: ZOO_SERVERS off by one", STS, "server.1=zookeeper-0.", "server.1=zookeeper-1.", "ZOO_SERVERS is server.N+1"),
    ("k8s: ZOO_SERVERS in another namespace", STS, "server.2=zookeeper-1.zookeeper-headless:",
     "server.2=zookeeper-1.zookeeper-headless.default:", "ZOO_SERVERS is server.N+1"),
    ("k8s: ZOO_MY_ID not ordinal+1", STS, "ZOO_MY_ID=$((${HOSTNAME##*-}+1))", "ZOO_MY_ID=${HOSTNAME##*-}",
     "ZOO_MY_ID is the pod ordinal + 1"),
    ("k8s: ZooKeeper volume not persistent", STS, "    - metadata:\n        name: data", "    - metadata:\n        name: storage",
     "ZOO_DATA_DIR=/data is on a persistent volume"),
    ("k8s: ZooKeeper transaction log off the volume", STS, "value: /data/datalog", "value: /datalog",
     "ZOO_DATA_LOG_DIR=/datalog is on a persistent volume"),
    ("k8s: ZooKeeper metrics port not exposed", STS, "metricsProvider.httpPort=7000", "metricsProvider.httpPort=7001",
     "Prometheus metrics provider on containerPort 7001"),
    ("k8s: ZooKeeper probe uses a command not whitelisted", STS, 'value: "srvr,ruok,mntr"', 'value: "srvr,mntr"',
     "livenessProbe asks whitelisted four-letter words"),
    ("k8s: ZooKeeper probe on the wrong port", STS, "echo srvr | nc -w 2 127.0.0.1 2181", "echo srvr | nc -w 2 127.0.0.1 2888",
     "readinessProbe asks whitelisted four-letter words"),
    ("k8s: TURNSTILE_ZK names another Service", CM, 'TURNSTILE_ZK: "zookeeper-client:2181"', 'TURNSTILE_ZK: "zookeeper:2181"',
     "TURNSTILE_ZK=zookeeper:2181"),
    ("k8s: TURNSTILE_ZK in another namespace", CM, 'TURNSTILE_ZK: "zookeeper-client:2181"',
     'TURNSTILE_ZK: "zookeeper-client.default.svc.cluster.local:2181"', "TURNSTILE_ZK=zookeeper-client.default"),
    ("k8s: TURNSTILE_ZK wrong port", CM, 'TURNSTILE_ZK: "zookeeper-client:2181"', 'TURNSTILE_ZK: "zookeeper-client:2888"',
     "TURNSTILE_ZK=zookeeper-client:2888"),
    ("k8s: kustomization misses a manifest", KUST, "  - zookeeper-pdb.yaml\n", "", "lists every manifest"),
    ("k8s: kustomization lists a missing file", KUST, "  - zookeeper-pdb.yaml\n", "  - zookeeper-pdb.yaml\n  - zookeeper-config.yaml\n",
     "lists every manifest"),
    ("k8s: object in another namespace", K + "turnstile-service.yaml", "  name: turnstile\n", "  name: turnstile\n  namespace: default\n",
     "is in the kustomization namespace"),
    ("k8s: Namespace manifest differs", K + "namespace.yaml", "name: turnstile", "name: locks", "a Namespace manifest creates turnstile"),
    ("k8s: image differs from the compose build", KUST, "newTag: 0.1.0", "newTag: 0.2.0", "is the one docker-compose builds"),
    # --- make-dev-ca.sh (run in a temp dir, certificates checked with openssl) ---
    ("pki: client certificate for servers", MC, 'issue "client-$(slug_of "$id")" "$cn" clientAuth',
     'issue "client-$(slug_of "$id")" "$cn" serverAuth', "extendedKeyUsage clientAuth"),
    ("pki: client identity not in a URI SAN", MC, '"URI:$id"', '"DNS:$cn"', "carries a URI SAN"),
    ("pki: keys readable by others", MC, 'chmod 600 "$1.tmp"', 'chmod 644 "$1.tmp"', "has mode 600"),
    ("pki: RSA keys", MC, "-algorithm EC -pkeyopt ec_paramgen_curve:P-256", "-algorithm RSA -pkeyopt rsa_keygen_bits:2048",
     "EC P-256"),
    ("pki: server certificate misses a replica", MC, "SERVER_DNS=(localhost turnstile turnstile-1 turnstile-2)",
     "SERVER_DNS=(localhost turnstile turnstile-1)", "names every replica service"),
    ("pki: a rerun replaces the CA", MC, 'if [ -e "$out/ca.crt" ] || [ -e "$out/ca.key" ]; then', "if false; then",
     "keeps the existing CA"),
    ("pki: keys not git-ignored", ".gitignore", "/deploy/local/dev-pki/\n", "", "ignored by .gitignore"),
    ("pki: keys in the Docker build context", DI, "\ndeploy/local/dev-pki\n", "\n",
     "build context excludes deploy/local/dev-pki"),
    # --- compose mTLS override (merged with docker-compose.yml) ---
    ("compose-mtls: variable that is no turnstiled flag", CO, "TURNSTILE_AUTHZ_FILE:", "TURNSTILE_AUTHZ:",
     "not a turnstiled flag"),
    ("compose-mtls: policy without mutual TLS", CO, "    TURNSTILE_TLS_CLIENT_CA_FILE: /etc/turnstile/pki/ca.crt\n", "",
     "--authz-file needs --tls-client-ca-file"),
    ("compose-mtls: CA certificate as the server certificate", CO, "TURNSTILE_TLS_CERT_FILE: /etc/turnstile/pki/server.crt",
     "TURNSTILE_TLS_CERT_FILE: /etc/turnstile/pki/ca.crt", "TURNSTILE_TLS_CERT_FILE=/etc/turnstile/pki/ca.crt is make-dev-ca.sh's server.crt"),
    ("compose-mtls: policy path outside its mount", CO, "TURNSTILE_AUTHZ_FILE: /etc/turnstile/authz/policy.json",
     "TURNSTILE_AUTHZ_FILE: /etc/turnstile/policy.json", "TURNSTILE_AUTHZ_FILE=/etc/turnstile/policy.json is a policy file"),
    ("compose-mtls: policy directory missing", CO, "./deploy/compose/authz:", "./deploy/compose/policy:",
     "mounted ./deploy/compose/policy exists"),
    ("compose-mtls: healthcheck without a client certificate", CO,
     '"--tls-cert-file", "/etc/turnstile/pki/client-turnstile.local-replica-healthcheck.crt",', "",
     "healthcheck presents a client certificate"),
    ("compose-mtls: healthcheck certificate not copied into the volume", CO,
     " ca.crt server.crt client-turnstile.local-replica-healthcheck.crt /pki/", " ca.crt server.crt /pki/",
     "are a client certificate of make-dev-ca.sh"),
    ("compose-mtls: CA key copied into the volume", CO, "-m 0400 server.key", "-m 0400 ca.key server.key",
     "never copies the CA key"),
    ("compose-mtls: keys not owned by the image's user", CO, "install -o 10001 -g 10001 -m 0400",
     "install -o 0 -g 0 -m 0400", "installs the files owned by uid 10001"),
    ("compose-mtls: replicas do not wait for the certificates", CO, "condition: service_completed_successfully",
     "condition: service_started", "service_completed_successfully"),
    ("compose-mtls: certificate volume writable", CO, "- turnstile-pki:/etc/turnstile/pki:ro", "- turnstile-pki:/etc/turnstile/pki",
     "volume turnstile-pki is mounted read-only"),
    ("compose-mtls: copies from another directory", CO, "source: ./deploy/local/dev-pki", "source: ./deploy/local/pki",
     "copies from deploy/local/dev-pki"),
    ("compose-mtls: policy action turnstiled does not know", CP, '"keepalive", "release"]', '"keepalive", "renew"]',
     "unknown action 'renew'"),
    ("compose-mtls: policy no longer lets the demo client take demo", CP, '"locks": ["demo"]', '"locks": ["demo/"]',
     "lets make-dev-ca.sh's default client"),
    # --- Kubernetes mTLS overlay (rendered; cert-manager objects checked here) ---
    ("k8s-mtls: base includes the overlay", KUST, "  - zookeeper-pdb.yaml\n", "  - zookeeper-pdb.yaml\n  - ../k8s-mtls\n",
     "does not include the overlay"),
    ("k8s-mtls: overlay in another namespace", KK, "namespace: turnstile\n", "namespace: locks\n",
     "sets the namespace turnstile of the base"),
    ("k8s-mtls: policy ConfigMap renamed on every edit", KK, "disableNameSuffixHash: true", "disableNameSuffixHash: false",
     "disableNameSuffixHash"),
    ("k8s-mtls: patch targets no object", KD, "  name: turnstile\nspec:", "  name: turnstiled\nspec:",
     "targets Deployment/turnstiled"),
    ("k8s-mtls: Certificate without secretName", KC, "  secretName: turnstile-example-client-tls\n", "",
     "spec.secretName (required)"),
    ("k8s-mtls: Certificate field cert-manager does not know", KC, "  commonName: turnstile\n", "  commonname: turnstile\n",
     "unknown field spec.commonname"),
    ("k8s-mtls: issuerRef names a missing Issuer", KC, "  issuerRef:\n    name: turnstile-ca\n",
     "  issuerRef:\n    name: turnstile-intermediate\n", "issuerRef Issuer/turnstile-intermediate is an issuer"),
    ("k8s-mtls: CA certificate not a CA", KC, "  isCA: true\n", "  isCA: false\n", "isCA"),
    ("k8s-mtls: CA Issuer reads another Secret", KC, "  ca:\n    secretName: turnstile-ca", "  ca:\n    secretName: turnstile-root",
     "secretName turnstile-root is an isCA Certificate's secret"),
    ("k8s-mtls: server certificate misses the headless Service", KC, "    - turnstile-headless.turnstile.svc.cluster.local\n", "",
     "dnsNames cover every Service"),
    ("k8s-mtls: server certificate without 127.0.0.1 (exec probes)", KC, "  ipAddresses:\n    - 127.0.0.1\n", "",
     "--server 127.0.0.1 is a name of the server certificate"),
    ("k8s-mtls: health-check certificate without client auth", KC, "    - client auth\n", "    - server auth\n",
     "presents a client-auth Certificate"),
    ("k8s-mtls: example client without a URI SAN", KC, "  uris:\n    - spiffe://cluster.local/ns/turnstile/sa/example-client\n",
     "  dnsNames:\n    - example-client\n", "an example client Certificate with a URI SAN"),
    ("k8s-mtls: mounted Secret no Certificate makes", KD, "secretName: turnstile-server-tls", "secretName: turnstile-tls",
     "mounted Secret turnstile-tls is the secret of a Certificate"),
    ("k8s-mtls: key path is not the mounted key", KD, "value: /etc/turnstile/tls/tls.key", "value: /etc/turnstile/tls/server.key",
     "TURNSTILE_TLS_KEY_FILE=/etc/turnstile/tls/server.key is tls.key"),
    ("k8s-mtls: variable that is no turnstiled flag", KD, "name: TURNSTILE_TLS_CLIENT_CA_FILE", "name: TURNSTILE_TLS_CLIENT_CA",
     "not a turnstiled flag"),
    ("k8s-mtls: probe still the kubelet's gRPC probe", KD, "            grpc: null\n", "",
     "readinessProbe is an exec probe"),
    ("k8s-mtls: probe without the client key", KD, "                - --tls-key-file\n                - /etc/turnstile/healthcheck/tls.key\n", "",
     "readinessProbe presents the health-check client certificate"),
    ("k8s-mtls: probe trusts another CA", KD, "                - /etc/turnstile/healthcheck/ca.crt\n", "                - /etc/turnstile/authz/policy.json\n",
     "readinessProbe --tls-ca-file=/etc/turnstile/authz/policy.json is the CA certificate"),
    ("k8s-mtls: probe RPC outlives the probe", KD, "                - 1s\n", "                - 5s\n",
     "readinessProbe --rpc-timeout 5s is below"),
    ("k8s-mtls: liveness probe asks the overall health", KD, "                - liveness\n", "",
     "livenessProbe asks the service turnstiled keeps SERVING"),
    ("k8s-mtls: Secret files world-readable", KD, "defaultMode: 288   # 0440", "defaultMode: 420   # 0644",
     "not world-readable"),
    ("k8s-mtls: no fsGroup (turnstiled cannot read its key)", KD, "        fsGroup: 10001\n", "        fsGroup: 0\n",
     "pod fsGroup 0 is turnstiled's group"),
    ("k8s-mtls: policy field turnstiled does not know", KP, '"locks": ["example/"]', '"lock": ["example/"]',
     "unknown field 'lock'"),
    ("k8s-mtls: policy deny rule with actions", KP, '"admin": true', '"deny": true, "actions": ["list"]',
     "a deny rule refuses every action"),
    ("k8s-mtls: policy is no JSON", KP, '"admin": true\n', '"admin": true,\n', "parses as JSON"),
    ("k8s-mtls: policy does not grant the example client", KP, '"spiffe://cluster.local/ns/turnstile/sa/example-client"',
     '"spiffe://cluster.local/ns/turnstile/sa/example"', "grants the example client"),
    # --- README ---
    ("readme: exec into a service that does not exist", "deploy/README.md", "docker compose exec turnstile-1 turnstile describe demo",
     "docker compose exec turnstile describe demo", "names a compose service"),
    ("readme: URL on an unpublished port", "deploy/README.md", "http://127.0.0.1:9090", "http://127.0.0.1:9091",
     "http://127.0.0.1:9091 is a published compose port"),
]


def copy_tree(src, dst):
    def ignore(d, names):
        if os.path.abspath(d) == os.path.abspath(src):
            return [n for n in names if n in (".git", "node_modules") or n == "build" or n.startswith("build-")]
        return [n for n in names if n in ("__pycache__", "node_modules")]
    shutil.copytree(src, dst, ignore=ignore, symlinks=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--facts", required=True)
    ap.add_argument("--node-modules", required=True)
    a = ap.parse_args()
    facts = json.load(open(a.facts))
    schema_js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_k8s_schema.js")
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="turnstile-deploy-mut-") as tmp:
        work = os.path.join(tmp, "repo")
        copy_tree(a.root, work)
        base = check_deploy.Checker(work, facts, a.node_modules, schema_js, quiet=True)
        if not base.run_all():
            print("FAIL: the unmutated copy does not pass:")
            for f in base.failed:
                print(f"FAIL:   {f}")
            return 1
        caught, missed = 0, []
        for what, rel, old, new, expect in MUTATIONS:
            p = os.path.join(work, rel)
            orig = open(p, encoding="utf-8").read()
            if old not in orig:
                missed.append(f"{what}: mutation is stale (text not found in {rel})")
                continue
            mutated = orig.replace(old, new) if what.endswith("(all)") else orig.replace(old, new, 1)
            open(p, "w", encoding="utf-8").write(mutated)
            try:
                ch = check_deploy.Checker(work, facts, a.node_modules, schema_js, quiet=True)
                ch.run_all()
            finally:
                open(p, "w", encoding="utf-8").write(orig)
            hits = [f for f in ch.failed if expect in f]
            if hits:
                caught += 1
                print(f"  caught  {what}\n          -> FAIL: {hits[0].splitlines()[0][:200]}")
            else:
                missed.append(f"{what}: expected a failure containing {expect!r}, got "
                              f"{ch.failed[:3] if ch.failed else 'no failure'}")
    print(f"check_deploy_mutations: {caught} of {len(MUTATIONS)} mutations caught by the intended rule "
          f"({time.time() - t0:.1f}s)")
    for m in missed:
        print(f"FAIL: mutation not caught: {m}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
