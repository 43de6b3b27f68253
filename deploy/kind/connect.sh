#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Mount the workspace of the kind deployment's agentd on this host with wsfs.
# wsfs reaches agentd through `kubectl exec -i POD -- agentd --stdio`: a
# second agentd in the pod, serving the same /workspace over the exec stream.
# (kubectl port-forward does not reach a pod under gVisor: its loopback lives
# inside the sandbox.) The exec'd agentd needs no token: who may exec into the
# pod is decided by RBAC (pods/exec).
#
# Usage: deploy/kind/connect.sh MOUNTPOINT [WSFS_OPTION]...
#   e.g. deploy/kind/connect.sh ~/mnt/agentd -o rpc_timeout=30
# Unmount with: fusermount3 -u MOUNTPOINT
# Environment: WSFS (default: wsfs on PATH, else build/fusefs/wsfs),
#   WSB_KUBE_CONTEXT (default kind-$KIND_CLUSTER).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../images/lib.sh
. "$(dirname "$0")/../../images/lib.sh"
wsb_load_env

(($# >= 1)) || die "usage: ${0##*/} MOUNTPOINT [WSFS_OPTION]..."
mnt=$1
shift
[[ -d $mnt ]] || die "mount point '$mnt' is not a directory"
need kubectl
wsfs=${WSFS:-$(command -v wsfs || echo "$wsb_top/build/fusefs/wsfs")}
[[ -x $wsfs ]] || die "no wsfs (build it: meson setup build && ninja -C build), or set WSFS"

ns=$(awk '$1 == "namespace:" { print $2; exit }' "$wsb_top/deploy/kind/kustomization.yaml")
context=${WSB_KUBE_CONTEXT:-kind-$KIND_CLUSTER}
pod=$(kubectl --context "$context" -n "$ns" get pods -l app.kubernetes.io/name=agentd \
	--field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}')
[[ -n $pod ]] || die "no running agentd pod in namespace $ns (context $context): run deploy/kind/up.sh"

cmd="kubectl --context $(printf %q "$context") exec -i -n $ns $pod -c agentd -- agentd --root /workspace --stdio"
say "mounting $ns/$pod:/workspace on $mnt"
say "wsfs --exec '$cmd' $mnt $*"
"$wsfs" --exec "$cmd" "$mnt" "$@"
say "mounted; unmount with: fusermount3 -u $mnt"
