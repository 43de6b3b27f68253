#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Claim an agentd sandbox from the warm pool, wait until it is Ready, find its
# pod, check it runs under gVisor, and mount its workspace with wsfs.
#
# Usage: deploy/agent-sandbox/claim.sh [--print] NAME [MOUNTPOINT [WSFS_OPTION]...]
#   NAME        the SandboxClaim's name (a DNS-1123 label); an existing claim
#               of that name is reused
#   MOUNTPOINT  mount the workspace there (else print the wsfs command)
#   --print     print the SandboxClaim it would create (from claim.yaml) and exit
# Environment: WSFS (default wsfs on PATH, else build/fusefs/wsfs),
#   WSB_KUBE_CONTEXT (default kind-$KIND_CLUSTER), WSB_CLAIM_TIMEOUT (300s).
# Permissions: the wsbridge-client Role (rbac.yaml) is enough.
# Give it back with release.sh NAME (the workspace goes with it); pause it with
# suspend.sh NAME (the workspace stays).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

print=0
if [[ ${1:-} == --print ]]; then
	print=1
	shift
fi
(($# >= 1)) || die "usage: ${0##*/} [--print] NAME [MOUNTPOINT [WSFS_OPTION]...]"
name=$1
shift
valid_name "$name"

# claim.yaml with this name and namespace: its metadata.name and
# metadata.namespace lines are the first two at that indentation.
claim=$(awk -v name="$name" -v ns="$ns" '
	/^metadata:/ { meta = 1; print; next }
	meta && /^  name: / { print "  name: " name; next }
	meta && /^  namespace: / { print "  namespace: " ns; next }
	/^[^ #]/ { meta = 0 }
	{ print }
' "$here/claim.yaml")
if ((print)); then
	printf '%s\n' "$claim"
	exit 0
fi
need kubectl

if "${K[@]}" get sandboxclaim "$name" >/dev/null 2>&1; then
	say "claim $ns/$name exists; using it"
else
	say "claiming a sandbox: SandboxClaim $ns/$name"
	printf '%s\n' "$claim" | "${K[@]}" create -f - >/dev/null
fi
say "waiting for it to be Ready"
"${K[@]}" wait --for=condition=Ready "sandboxclaim/$name" --timeout="${WSB_CLAIM_TIMEOUT:-300s}" >/dev/null
sandbox=$(sandbox_of "$name")
pod=$(pod_of "$sandbox")
rc=$("${K[@]}" get pod "$pod" -o jsonpath='{.spec.runtimeClassName}')
[[ $rc == gvisor ]] || die "pod $pod has runtimeClassName '$rc', not gvisor: it is NOT sandboxed"
banner=$("${K[@]}" exec "$pod" -c agentd -- dmesg 2>&1 || true)
grep -q 'Starting gVisor' <<<"$banner" ||
	die "pod $pod shows no gVisor kernel banner in dmesg: it is not sandboxed"
say "sandbox $sandbox, pod $pod (gVisor)"

cmd=$(exec_cmd "$pod")
if (($# == 0)); then
	cat <<EOT
Mount its workspace:   ${WSFS:-wsfs} --exec '$cmd' MOUNTPOINT
Or run one command:    wsctl --exec '$cmd' exec -- ls -la
EOT
	exit 0
fi
mnt=$1
shift
[[ -d $mnt ]] || die "mount point '$mnt' is not a directory"
wsfs=${WSFS:-$(command -v wsfs || echo "$wsb_top/build/fusefs/wsfs")}
[[ -x $wsfs ]] || die "no wsfs (build it: meson setup build && ninja -C build), or set WSFS"
"$wsfs" --exec "$cmd" "$mnt" "$@"
say "workspace of $name mounted on $mnt; unmount with: fusermount3 -u $mnt"
