# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
#
# Shared by deploy/agent-sandbox/*.sh (sourced, never run): the namespace, the
# kubectl context, and how to get from a SandboxClaim to its Sandbox and pod.
#
#   ns                      namespace of kustomization.yaml (wsbridge-agents)
#   K                       kubectl --context CONTEXT -n NS (array)
#   valid_name NAME         die unless NAME is a DNS-1123 label
#   sandbox_of CLAIM        the claim's Sandbox (status.sandbox.name)
#   pod_of SANDBOX          the Sandbox's pod: by its status.selector, else
#                           its agents.x-k8s.io/pod-name annotation, else its name
#   exec_cmd POD            the command that reaches agentd in POD over stdio
#   workspace_on_pvc SANDBOX  true if /workspace of its agentd container is a
#                           volumeClaimTemplate (a PVC that outlives the pod)

# shellcheck source-path=SCRIPTDIR source=../../images/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../images/lib.sh"
wsb_load_env

here=$wsb_top/deploy/agent-sandbox
ns=$(awk '$1 == "namespace:" { print $2; exit }' "$here/kustomization.yaml")
[[ -n $ns ]] || die "no namespace: in $here/kustomization.yaml"
context=${WSB_KUBE_CONTEXT:-kind-$KIND_CLUSTER}
K=(kubectl --context "$context" -n "$ns")

valid_name() {
	[[ $1 =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] ||
		die "'$1' is not a valid claim name (lower-case letters, digits and '-', at most 63)"
}

sandbox_of() {
	local s
	s=$("${K[@]}" get sandboxclaim "$1" -o jsonpath='{.status.sandbox.name}') || exit 1
	[[ -n $s ]] || die "claim $1 has no sandbox yet (kubectl -n $ns describe sandboxclaim $1)"
	printf '%s\n' "$s"
}

pod_of() {
	local sel pod
	sel=$("${K[@]}" get sandbox "$1" -o jsonpath='{.status.selector}') || exit 1
	if [[ -n $sel ]]; then
		pod=$("${K[@]}" get pods -l "$sel" --field-selector=status.phase=Running \
			-o jsonpath='{.items[0].metadata.name}')
	fi
	if [[ -z ${pod:-} ]]; then
		pod=$("${K[@]}" get sandbox "$1" -o jsonpath='{.metadata.annotations.agents\.x-k8s\.io/pod-name}')
	fi
	printf '%s\n' "${pod:-$1}"
}

exec_cmd() {
	printf 'kubectl --context %q exec -i -n %s %s -c agentd -- agentd --root /workspace --stdio\n' \
		"$context" "$ns" "$1"
}

workspace_on_pvc() {
	local vcts vol
	vcts=" $("${K[@]}" get sandbox "$1" -o jsonpath='{.spec.volumeClaimTemplates[*].metadata.name}') "
	vol=$("${K[@]}" get sandbox "$1" -o \
		jsonpath='{.spec.podTemplate.spec.containers[?(@.name=="agentd")].volumeMounts[?(@.mountPath=="/workspace")].name}')
	[[ -n $vol && $vcts == *" $vol "* ]]
}
