#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Delete the kind cluster deploy/kind/up.sh made, with everything in it: the
# agentd pod, its workspace PVC (kind's local-path volumes live in the node
# containers), any Agent Sandbox sandboxes. Unmount wsfs mounts first
# (fusermount3 -u DIR); they fail with ENOTCONN once the pod is gone.
#
# Usage: deploy/kind/down.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../images/lib.sh
. "$(dirname "$0")/../../images/lib.sh"
wsb_load_env

need kind
if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
	say "deleting kind cluster $KIND_CLUSTER"
	kind delete cluster --name "$KIND_CLUSTER"
else
	say "no kind cluster $KIND_CLUSTER"
fi
