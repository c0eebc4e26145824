#!/usr/bin/env bash
# make kind-e2e: the e2e suite on a kind cluster, for a laptop with Docker, or podman
# (KIND_EXPERIMENTAL_PROVIDER=podman, which kind needs to be told). This project's machines
# cannot run it: kind's node image cannot be pulled there, nor built (kind build node-image
# needs the kindest/base image and a Kubernetes release from dl.k8s.io; docs/image.md).
# There `make e2e-kube` runs the same suite on a real control plane and a real node.
#
#   hack/kind-e2e.sh               create a cluster, run test/e2e against it, delete it
#   KEEP_CLUSTER=1 hack/kind-e2e.sh   leave the cluster up afterwards (its kubeconfig is
#                                     printed), e.g. to follow the README by hand
#
# It needs Docker (running) or podman, kind and kubectl on the PATH, and `make setup` done.
# Steps:
#   1. create a kind cluster (KIND_CLUSTER, default ome-e2e) with its own kubeconfig;
#   2. build the manager's image (make image: hack/image.sh) and load it into the cluster;
#   3. install OME's CRDs (config/crd) and the fake Slice CRD (test/e2e/crds);
#   4. run `ome-sim provider --kubeconfig` against it: fake TPU nodes, the Slice scheduler,
#      and a kubelet stand-in for pods on those nodes (kind's own scheduler binds them);
#   5. `helm upgrade --install` charts/ome-resources with the walkthrough's Step 1 values
#      (config/samples/values.yaml) and the image just built, and wait for the rollout;
#      then the sample model and runtime (config/samples);
#   6. run pytest test/e2e with OME_E2E_KUBECONFIG (and OME_E2E_METRICS_URL: `ome-sim
#      metrics-relay` in front of a kubectl port-forward of the metrics Service, which
#      scrapes its HTTPS with a metrics-reader token);
#   7. tear everything down, on success and on failure alike (unless KEEP_CLUSTER=1).
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${KIND_CLUSTER:-ome-e2e}"
IMAGE="$(hack/image.sh --name)"
BIN="${BIN:-.venv/bin}"

say() { printf 'kind-e2e: %s\n' "$*"; }
die() { printf 'kind-e2e: %s\n' "$*" >&2; exit 1; }

for tool in kind kubectl; do
  command -v "$tool" >/dev/null 2>&1 || die "needs $tool on the PATH"
done
if [[ "${KIND_EXPERIMENTAL_PROVIDER:-}" == podman ]]; then
  command -v podman >/dev/null 2>&1 || die "KIND_EXPERIMENTAL_PROVIDER=podman needs podman"
else
  docker info >/dev/null 2>&1 || die "needs a running Docker engine (docker info failed), or podman with KIND_EXPERIMENTAL_PROVIDER=podman"
fi
[[ -x "$BIN/ome-sim" ]] || die "needs $BIN/ome-sim: run make setup first"
HELM="$(hack/helm.sh)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ome-kind-e2e.XXXXXX")"
export KUBECONFIG="$WORK/kubeconfig"
PROVIDER_PID=""
FORWARD_PID=""
RELAY_PID=""
CREATED=""

teardown() {
  local code=$?
  if ((code != 0)) && [[ -n "$CREATED" ]]; then
    kubectl logs -n ome -l control-plane=ome-controller-manager --tail=-1 \
      >"$WORK/manager.log" 2>&1 || true
  fi
  for pid in "$RELAY_PID" "$FORWARD_PID" "$PROVIDER_PID"; do
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      kill -INT "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [[ -n "$CREATED" && -z "${KEEP_CLUSTER:-}" ]]; then
    say "deleting kind cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  elif [[ -n "$CREATED" ]]; then
    say "the cluster stays up: export KUBECONFIG=$KUBECONFIG (kind delete cluster --name $CLUSTER)"
  fi
  if ((code != 0)); then
    say "failed (exit code $code); the provider's log and the manager's are in $WORK" >&2
  elif [[ -z "${KEEP_CLUSTER:-}" ]]; then
    rm -rf "$WORK"
  fi
}
trap teardown EXIT
trap 'exit 130' INT TERM

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  die "a kind cluster named $CLUSTER exists already: delete it or set KIND_CLUSTER"
fi
say "1/7 creating kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" --wait 120s
CREATED=1

say "2/7 building $IMAGE and loading it into the cluster"
hack/image.sh >/dev/null
kind load docker-image "$IMAGE" --name "$CLUSTER"

say "3/7 installing OME's CRDs and the fake Slice CRD"
kubectl apply -f config/crd/ -f test/e2e/crds/
kubectl wait --for=condition=Established crd --all --timeout=60s

say "4/7 starting the simulated GKE provider (its log: $WORK/provider.log)"
"$BIN/ome-sim" provider --kubeconfig "$KUBECONFIG" --activation-delay 1s \
  >"$WORK/provider.log" 2>&1 &
PROVIDER_PID=$!
for _ in $(seq 1 600); do
  grep -q '^press Ctrl-C' "$WORK/provider.log" && break
  kill -0 "$PROVIDER_PID" 2>/dev/null || { cat "$WORK/provider.log" >&2; die "the provider exited"; }
  sleep 0.1
done
grep -q '^press Ctrl-C' "$WORK/provider.log" || die "the provider did not start within a minute"

say "5/7 helm upgrade --install ome charts/ome-resources with the walkthrough's values"
kubectl create namespace ome --dry-run=client -o yaml | kubectl apply -f -
"$HELM" upgrade --install ome charts/ome-resources --namespace ome \
  -f config/samples/values.yaml \
  --set image.repository="${IMAGE%%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never
kubectl rollout status deployment ome-controller-manager -n ome --timeout=180s
kubectl apply -f config/samples/clusterbasemodel-qwen3-0-6b.yaml \
  -f config/samples/clusterservingruntime-srt-qwen3-tpu.yaml

say "6/7 running test/e2e against the cluster"
# The metrics are HTTPS behind a bearer token: a port-forward of the metrics Service, and
# ome-sim metrics-relay in front of it (plain HTTP, with a metrics-reader token).
port="$("$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
kubectl port-forward -n ome service/ome-controller-manager-metrics-service "$port:8443" \
  >"$WORK/port-forward.log" 2>&1 &
FORWARD_PID=$!
"$BIN/ome-sim" metrics-relay --kubeconfig "$KUBECONFIG" --to "127.0.0.1:$port" \
  >"$WORK/metrics-relay.log" 2>&1 &
RELAY_PID=$!
for _ in $(seq 1 100); do
  grep -q '^manager metrics: ' "$WORK/metrics-relay.log" && break
  sleep 0.1
done
metrics_url="$(sed -n 's/^manager metrics: //p' "$WORK/metrics-relay.log")"
[[ -n "$metrics_url" ]] || die "ome-sim metrics-relay did not start: $(cat "$WORK/metrics-relay.log")"
# shellcheck disable=SC2086 # PYTEST_ARGS is split on purpose
OME_E2E_KUBECONFIG="$KUBECONFIG" OME_E2E_METRICS_URL="$metrics_url" \
  "$BIN/python" -m pytest test/e2e ${PYTEST_ARGS:-}

say "7/7 passed; tearing down"
