#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Install the Agent Sandbox path into the kind cluster of deploy/kind (made by
# deploy/kind/up.sh, --cluster-only is enough: it registers gVisor and applies
# RuntimeClass gvisor):
#   1. the Agent Sandbox controller and CRDs, release $AGENT_SANDBOX_VERSION
#      (images/image.env; the CRDs tests/deploy validates against), applied
#      server-side (the CRDs are too big for client-side apply's annotation)
#   2. the agentd image, built (skip with --no-build) and loaded into the nodes
#   3. the token Secret agentd-token (random, once), then
#      kubectl apply -k deploy/agent-sandbox: namespace, RBAC, SandboxTemplate,
#      SandboxWarmPool
#   4. wait until the warm pool has a Ready sandbox
#
# Usage: deploy/agent-sandbox/install.sh [--dry-run] [--no-build]
# Environment: WSB_KUBE_CONTEXT (default kind-$KIND_CLUSTER). Needs cluster-admin
# on that context (CRDs), docker and kind for the image.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

dry=0 build=1
for a in "$@"; do
	case $a in
	--dry-run) dry=1 ;;
	--no-build) build=0 ;;
	-h | --help)
		sed -n '3,19p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument '$a' (see --help)" ;;
	esac
done
run() {
	if ((dry)); then
		printf '+ %s\n' "$*"
	else
		"$@"
	fi
}
KC=(kubectl --context "$context")
image=$AGENTD_IMAGE:$AGENTD_TAG
release=https://github.com/kubernetes-sigs/agent-sandbox/releases/download/$AGENT_SANDBOX_VERSION/sandbox-with-extensions.yaml

if ((!dry)); then
	need kubectl
	"${KC[@]}" get runtimeclass gvisor >/dev/null 2>&1 ||
		die "no RuntimeClass gvisor in context $context: run deploy/kind/up.sh --cluster-only first"
fi

say "installing the Agent Sandbox controller $AGENT_SANDBOX_VERSION"
run "${KC[@]}" apply --server-side -f "$release"
for crd in sandboxes.agents.x-k8s.io sandboxtemplates.extensions.agents.x-k8s.io \
	sandboxclaims.extensions.agents.x-k8s.io sandboxwarmpools.extensions.agents.x-k8s.io; do
	run "${KC[@]}" wait --for=condition=Established "crd/$crd" --timeout=120s
done
# The controller's pods appear a moment after the apply: wait for them to
# exist, then to be Ready.
if ((!dry)); then
	for _ in $(seq 90); do
		[[ -n $("${KC[@]}" -n agent-sandbox-system get pods -o name 2>/dev/null) ]] && break
		sleep 2
	done
fi
run "${KC[@]}" -n agent-sandbox-system wait --for=condition=Ready pod --all --timeout=180s

if ((build)); then
	if ((dry)); then
		"$wsb_top/images/build.sh" --print agentd | sed 's/^/+ /'
	else
		"$wsb_top/images/build.sh" agentd
	fi
fi
if [[ $context == kind-* ]]; then
	run kind load docker-image "$image" --name "${context#kind-}"
fi

run "$wsb_top/images/sync.sh"
run "${KC[@]}" apply -f "$here/namespace.yaml"
if ((dry)); then
	printf '+ %s\n' "${K[*]} create secret generic agentd-token --from-file=token=<random 32 bytes, hex> (once)"
elif ! "${K[@]}" get secret agentd-token >/dev/null 2>&1; then
	say "making Secret $ns/agentd-token (a random bearer token for in-cluster clients)"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")
	"${K[@]}" create secret generic agentd-token --from-file=token="$tmp/token" >/dev/null
	rm -rf "$tmp"
fi
run "${KC[@]}" apply -k "$here"
say "waiting for the warm pool to hold a Ready sandbox"
run "${K[@]}" wait --for=jsonpath='{.status.readyReplicas}'=1 sandboxwarmpool/agentd --timeout=300s

cat <<EOT

Claim a sandbox and mount its workspace:   deploy/agent-sandbox/claim.sh agent-1 ~/mnt/agent-1
Suspend it (pod gone, workspace kept):     deploy/agent-sandbox/suspend.sh agent-1
Resume it:                                 deploy/agent-sandbox/resume.sh agent-1
Give it back (workspace deleted):          deploy/agent-sandbox/release.sh --yes agent-1
In-cluster clients need their namespace labelled:
  kubectl label namespace NS wsbridge.dev/agentd-client=true
A kubeconfig token for the least-privilege client ServiceAccount:
  kubectl --context $context -n $ns create token wsbridge-client
EOT
