#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Resume a sandbox suspend.sh suspended: a new pod starts on the same
# workspace PVC. The pod may have a new name: remount (claim.sh NAME MNT
# finds it again).
#
# Usage: deploy/agent-sandbox/resume.sh NAME    (the SandboxClaim's name)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

(($# == 1)) || die "usage: ${0##*/} NAME"
valid_name "$1"
need kubectl
sandbox=$(sandbox_of "$1")
say "resuming sandbox $sandbox of claim $1"
"${K[@]}" patch sandbox "$sandbox" --type merge -p '{"spec":{"operatingMode":"Running"}}' >/dev/null
"${K[@]}" wait --for=condition=Ready "sandbox/$sandbox" --timeout="${WSB_CLAIM_TIMEOUT:-300s}" >/dev/null
pod=$(pod_of "$sandbox")
say "running again: pod $pod"
printf 'Mount its workspace: wsfs --exec %q MOUNTPOINT\n' "$(exec_cmd "$pod")"
