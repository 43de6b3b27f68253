#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Suspend a claimed sandbox: its pod is deleted (no CPU, no memory), the
# Sandbox and its workspace PVC stay; resume.sh brings a new pod on the same
# workspace. Refuses when /workspace is not on a volumeClaimTemplate: without a
# PVC the workspace lives and dies with the pod, and suspending would lose it.
# Mounts of the workspace fail (ENOTCONN) while it is suspended; remount after
# resume.sh.
#
# Usage: deploy/agent-sandbox/suspend.sh NAME    (the SandboxClaim's name)
# Under the hood: the Sandbox's spec.operatingMode = Suspended (a merge patch;
# the wsbridge-client Role grants patch on sandboxes for this).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

(($# == 1)) || die "usage: ${0##*/} NAME"
valid_name "$1"
need kubectl
sandbox=$(sandbox_of "$1")
if ! workspace_on_pvc "$sandbox"; then
	die "refusing to suspend $1: /workspace of sandbox $sandbox is not on a volumeClaimTemplate," \
		"so it would be deleted with the pod. Copy it out (wsctl get) and release.sh instead."
fi
say "suspending sandbox $sandbox of claim $1 (its workspace PVC stays)"
"${K[@]}" patch sandbox "$sandbox" --type merge -p '{"spec":{"operatingMode":"Suspended"}}' >/dev/null
"${K[@]}" wait --for=condition=Suspended "sandbox/$sandbox" --timeout=120s >/dev/null
say "suspended; resume with: deploy/agent-sandbox/resume.sh $1"
