#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Write the kustomize `images:` block of deploy/kind and deploy/agent-sandbox
# from images/image.env, so the manifests' image (the placeholder `agentd`)
# becomes $AGENTD_IMAGE:$AGENTD_TAG. deploy/kind/up.sh and
# deploy/agent-sandbox/install.sh run it before applying; the tests fail when
# the committed files are out of step.
#
# Usage: images/sync.sh [--check]   (--check: change nothing, exit 1 if stale)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
wsb_load_env

check=0
case ${1:-} in
--check) check=1 ;;
'') ;;
*) die "unknown argument '$1' (--check)" ;;
esac

stale=0
for k in "$wsb_top/deploy/kind/kustomization.yaml" "$wsb_top/deploy/agent-sandbox/kustomization.yaml"; do
	[[ -f $k ]] || die "no $k"
	grep -q '^images:$' "$k" || die "$k has no top-level images: block to rewrite"
	# Keep everything but the images: block (its list items, which are
	# indented or start with '-'), and write the block anew in its place.
	new=$(awk -v img="$AGENTD_IMAGE" -v tag="$AGENTD_TAG" '
		/^images:$/ { print; print "- name: agentd"; print "  newName: " img; print "  newTag: " tag; skip = 1; next }
		skip && /^(-| |$)/ { next }
		{ skip = 0; print }
	' "$k")
	if [[ $new != "$(cat "$k")" ]]; then
		stale=1
		if ((check)); then
			printf '%s: images: is not %s:%s (run images/sync.sh)\n' "${k#"$wsb_top"/}" "$AGENTD_IMAGE" "$AGENTD_TAG" >&2
		else
			printf '%s\n' "$new" >"$k.tmp" && mv "$k.tmp" "$k"
			say "${k#"$wsb_top"/}: images: set to $AGENTD_IMAGE:$AGENTD_TAG"
		fi
	fi
done
((check && stale)) && exit 1
exit 0
