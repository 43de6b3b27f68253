#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Give a claimed sandbox back: delete the SandboxClaim. Its Sandbox, pod and
# the workspace PVC (owned by the Sandbox) are deleted with it: the workspace
# is gone. Copy out what you need first (wsctl get), unmount (fusermount3 -u),
# or suspend.sh it instead to keep it. The warm pool makes a new sandbox to
# replace the one handed out.
#
# Usage: deploy/agent-sandbox/release.sh --yes NAME
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

yes=0
if [[ ${1:-} == --yes || ${1:-} == -y ]]; then
	yes=1
	shift
fi
(($# == 1)) || die "usage: ${0##*/} --yes NAME"
valid_name "$1"
((yes)) || die "releasing $1 deletes its workspace; run again with --yes to do it"
need kubectl
say "releasing $ns/$1 (its sandbox and workspace are deleted)"
"${K[@]}" delete sandboxclaim "$1" --wait=true
