#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# agentd in a gVisor sandbox on a local kind cluster, in one step:
#   1. check the kind CLI is the release images/image.env pins (KIND_VERSION):
#      a node image is built for one kind release
#   2. build the agentd image and the kind node image with gVisor
#      (images/build.sh; skip with --no-build)
#   3. create the cluster from kind-config.yaml (runsc registered with
#      containerd, runsc.toml mounted on every node), or reuse it
#   4. load the agentd image into the nodes (it is never pulled)
#   5. kubectl apply -k deploy/kind (after images/sync.sh and the token
#      Secret agentd-token, made once with a random token)
#   6. wait for the rollout, then prove the pod runs under gVisor: its
#      runtimeClassName is gvisor and `dmesg` in it prints gVisor's kernel
#      banner ("Starting gVisor..."); under runc, dmesg is refused or shows
#      the host's log. A pod that is not sandboxed fails the script.
#
# Usage: deploy/kind/up.sh [--dry-run] [--no-build] [--cluster-only]
#   --dry-run       print the commands that change things instead of running them
#   --no-build      use the images already built (images/build.sh)
#   --cluster-only  stop after creating the cluster and its RuntimeClass (for
#                   deploy/agent-sandbox/install.sh)
# Environment: WSB_KUBE_CONTEXT (default kind-$KIND_CLUSTER),
#   WSB_ANY_KIND_VERSION=1 to accept another kind CLI (at your own risk).
# Needs docker (a running engine), kind, kubectl. Undo with deploy/kind/down.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../images/lib.sh
. "$(dirname "$0")/../../images/lib.sh"
wsb_load_env

dry=0 build=1 cluster_only=0
for a in "$@"; do
	case $a in
	--dry-run) dry=1 ;;
	--no-build) build=0 ;;
	--cluster-only) cluster_only=1 ;;
	-h | --help)
		sed -n '3,27p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument '$a' (see --help)" ;;
	esac
done

here=$wsb_top/deploy/kind
ns=$(awk '$1 == "namespace:" { print $2; exit }' "$here/kustomization.yaml")
[[ -n $ns ]] || die "no namespace: in $here/kustomization.yaml"
context=${WSB_KUBE_CONTEXT:-kind-$KIND_CLUSTER}
image=$AGENTD_IMAGE:$AGENTD_TAG
K=(kubectl --context "$context")

# run CMD...: run it, or print it under --dry-run.
run() {
	if ((dry)); then
		printf '+ %s\n' "$*"
	else
		"$@"
	fi
}

if ((dry)); then
	say "dry run: nothing is changed; commands that would run follow"
else
	need docker kind kubectl
	got=$(kind version 2>/dev/null | awk '{ print $2; exit }')
	if [[ $got != "$KIND_VERSION" && ${WSB_ANY_KIND_VERSION:-0} != 1 ]]; then
		die "kind CLI is ${got:-unknown}, images/image.env pins $KIND_VERSION, whose node image is" \
			"$KIND_NODE_IMAGE. Install kind $KIND_VERSION (or set WSB_ANY_KIND_VERSION=1 and expect trouble)."
	fi
	docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
fi

if ((build)); then
	say "building $image and $KIND_GVISOR_NODE_IMAGE"
	if ((dry)); then
		"$wsb_top/images/build.sh" --print | sed 's/^/+ /'
	else
		"$wsb_top/images/build.sh"
	fi
fi

if ((!dry)) && kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
	say "kind cluster $KIND_CLUSTER exists; reusing it"
else
	say "creating kind cluster $KIND_CLUSTER (gVisor registered as runtime handler runsc)"
	# kind resolves the config's relative hostPath (runsc.toml) against its
	# working directory.
	run cd "$here"
	run kind create cluster --name "$KIND_CLUSTER" --image "$KIND_GVISOR_NODE_IMAGE" --config kind-config.yaml --wait 180s
	run cd "$wsb_top"
fi
if ((!dry)); then
	for node in $(kind get nodes --name "$KIND_CLUSTER"); do
		docker exec "$node" /usr/local/bin/runsc --version >/dev/null ||
			die "node $node has no runsc: was it created from $KIND_GVISOR_NODE_IMAGE?"
	done
fi
run "${K[@]}" apply -f "$here/runtimeclass.yaml"
if ((cluster_only)); then
	say "cluster ready (context $context); RuntimeClass gvisor applied"
	exit 0
fi

say "loading $image into the nodes"
run kind load docker-image "$image" --name "$KIND_CLUSTER"

run "$wsb_top/images/sync.sh"
run "${K[@]}" apply -f "$here/namespace.yaml"
if ((dry)); then
	printf '+ %s\n' "${K[*]} -n $ns create secret generic agentd-token --from-file=token=<random 32 bytes, hex> (once)"
elif ! "${K[@]}" -n "$ns" get secret agentd-token >/dev/null 2>&1; then
	say "making Secret $ns/agentd-token (a random bearer token for in-cluster clients)"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")
	"${K[@]}" -n "$ns" create secret generic agentd-token --from-file=token="$tmp/token" >/dev/null
	rm -rf "$tmp"
fi
run "${K[@]}" apply -k "$here"
run "${K[@]}" -n "$ns" rollout status deployment/agentd --timeout=180s

if ((dry)); then
	printf '+ %s\n' "${K[*]} -n $ns exec POD -c agentd -- dmesg   # must print 'Starting gVisor'"
	exit 0
fi
pod=$("${K[@]}" -n "$ns" get pods -l app.kubernetes.io/name=agentd \
	--field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}')
[[ -n $pod ]] || die "no running agentd pod in $ns"
rc=$("${K[@]}" -n "$ns" get pod "$pod" -o jsonpath='{.spec.runtimeClassName}')
[[ $rc == gvisor ]] || die "pod $pod has runtimeClassName '${rc}', not gvisor: it is NOT sandboxed"
say "checking the kernel the pod sees (kubectl exec $pod -- dmesg)"
banner=$("${K[@]}" -n "$ns" exec "$pod" -c agentd -- dmesg 2>&1 || true)
if ! grep -q 'Starting gVisor' <<<"$banner"; then
	printf '%s\n' "$banner" | head -5 >&2
	die "pod $pod does not run under gVisor: dmesg shows no 'Starting gVisor' banner"
fi
grep -m1 'Starting gVisor' <<<"$banner" >&2
say "agentd runs in gVisor: pod $ns/$pod"

wsctl=${WSCTL:-$(command -v wsctl || echo "$wsb_top/build/fusefs/wsctl")}
if [[ -x $wsctl ]]; then
	"$wsctl" --exec "kubectl --context $(printf %q "$context") exec -i -n $ns $pod -c agentd -- agentd --root /workspace --stdio" health
fi

cat <<EOT

Mount the workspace (FUSE, on this host; unmount with fusermount3 -u DIR):
  deploy/kind/connect.sh ~/mnt/agentd
Or run one command in it:
  ${wsctl##*/} --exec 'kubectl --context $context exec -i -n $ns $pod -c agentd -- agentd --root /workspace --stdio' exec -- ls -la
kubectl port-forward does not reach a gVisor pod: always go through kubectl exec.
Delete the cluster (and the workspace) with deploy/kind/down.sh.
EOT
