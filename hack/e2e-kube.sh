#!/usr/bin/env bash
# make e2e-kube: the black-box suite (test/e2e, the README walkthrough included) against a
# real control plane: etcd, kube-apiserver and kube-controller-manager built from their Go
# modules (hack/kube-binaries.sh), with the simulated GKE provider (TPU nodes), and a real
# node (containerd, runc, CNI, the kubelet and kube-proxy: hack/node-binaries.sh) running
# the manager's Deployment from the image `make image` built, as its ServiceAccount under
# config/rbac.
#
# 1. Builds the control plane and node binaries if they are not in the machine-wide cache
#    (once; about 7 and 2 minutes on two cores), and the image (hack/image.sh; its layers
#    are cached). Without Go it says why it cannot run and exits 0.
# 2. Starts `ome-sim run --control-plane kube --node real` on free ports, with its
#    kubeconfig and logs in a temporary directory, and waits until OME is up.
#    E2E_NODE=simulated runs the manager's pod on the provider's kubelet stand-in instead
#    (as a process; for a machine where a real node cannot run: no root, no containers).
# 3. Runs pytest test/e2e with OME_E2E_KUBECONFIG (and OME_E2E_METRICS_URL) pointing at it.
#    OME_E2E_CONTROL_PLANE=kube makes the tests that need a slower simulator start a second
#    such system of their own rather than skip.
# 4. Stops it (Ctrl-C to ome-sim), which removes the control plane's data directory.
# 5. Runs the conformance checks of stage/tests/sim (the tests marked `conformance`) against a
#    control plane of their own (OME_CONFORMANCE_APISERVER=kube), the same checks that
#    `make test` runs against the embedded server (docs/embedded-apiserver.md).
#
# PYTEST_ARGS passes more arguments to pytest, e.g. PYTEST_ARGS="-k walkthrough -x".
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-.venv/bin}"

status=0
hack/kube-binaries.sh >/dev/null || status=$?
if ((status == 3)); then
  echo "e2e-kube: skipped: no suitable Go to build the control plane (the line above says what it needs)"
  exit 0
elif ((status != 0)); then
  echo "e2e-kube: building the control plane binaries failed (exit code $status)" >&2
  exit "$status"
fi

NODE="${E2E_NODE:-real}"
if [[ "$NODE" == real ]]; then
  node_status=0
  hack/node-binaries.sh >/dev/null || node_status=$?
  if ((node_status != 0)); then
    echo "e2e-kube: building the node binaries failed (exit code $node_status); E2E_NODE=simulated runs without a real node" >&2
    exit "$node_status"
  fi
  hack/image.sh >/dev/null
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ome-e2e-kube.XXXXXX")"
OUT="$WORK/ome-sim.out"
SIM_PID=""
stop_sim() {
  if [[ -n "$SIM_PID" ]] && kill -0 "$SIM_PID" 2>/dev/null; then
    kill -INT "$SIM_PID" 2>/dev/null || true
    for _ in $(seq 1 600); do
      kill -0 "$SIM_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$SIM_PID" 2>/dev/null || true
  fi
}
cleanup() {
  local code=$?
  stop_sim
  if ((code != 0)); then
    echo "e2e-kube: ome-sim's output and the control plane's logs are kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$SECONDS
echo "e2e-kube: starting ome-sim run --control-plane kube --node $NODE (its output: $OUT)"
"$BIN/ome-sim" run --control-plane kube --node "$NODE" --kubeconfig "$WORK/kubeconfig" \
  --config-dir config --activation-delay 1s >"$OUT" 2>&1 &
SIM_PID=$!

# Until OME is up (the line ome-sim prints last), ome-sim exits, or 5 minutes pass.
metrics=""
for _ in $(seq 1 3000); do
  if grep -q '^press Ctrl-C' "$OUT"; then
    metrics="$(sed -n 's/^manager metrics: //p' "$OUT" | tail -n1)"
    break
  fi
  if ! kill -0 "$SIM_PID" 2>/dev/null; then
    echo "e2e-kube: ome-sim run exited before OME was up:" >&2
    cat "$OUT" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z "$metrics" ]]; then
  echo "e2e-kube: OME was not up within 5 minutes:" >&2
  cat "$OUT" >&2
  exit 1
fi
echo "e2e-kube: the control plane and OME are up after $((SECONDS - started))s; running test/e2e"

# shellcheck disable=SC2086 # PYTEST_ARGS is split on purpose
OME_E2E_KUBECONFIG="$WORK/kubeconfig" OME_E2E_METRICS_URL="$metrics" OME_E2E_CONTROL_PLANE=kube \
  "$BIN/python" -m pytest test/e2e ${PYTEST_ARGS:-}
stop_sim

echo "e2e-kube: the conformance checks of stage/tests/sim against kube-apiserver"
# shellcheck disable=SC2086 # PYTEST_ARGS is split on purpose
OME_CONFORMANCE_APISERVER=kube "$BIN/python" -m pytest stage/tests/sim -m conformance -q ${PYTEST_ARGS:-}
