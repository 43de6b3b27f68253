#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Build wsbridge's images with the names, tags and pins of images/image.env:
#   agentd     $AGENTD_IMAGE:$AGENTD_TAG       images/agentd.Dockerfile
#   kind-node  $KIND_GVISOR_NODE_IMAGE         images/kind-node-gvisor.Dockerfile
# The build context is the source tree (each Dockerfile's .dockerignore cuts
# it down), so this works from any directory. Needs Docker with BuildKit
# (Docker 23 or newer: <Dockerfile>.dockerignore, COPY --chmod).
#
# Usage: images/build.sh [--print] [agentd] [kind-node]   (default: both)
#   --print  print the docker commands instead of running them
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
wsb_load_env

print=0
targets=()
for a in "$@"; do
	case $a in
	--print) print=1 ;;
	agentd | kind-node) targets+=("$a") ;;
	-h | --help)
		sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument '$a' (--print, agentd, kind-node)" ;;
	esac
done
((${#targets[@]})) || targets=(agentd kind-node)

run() {
	if ((print)); then
		printf '%s\n' "$*"
	else
		say "$*"
		"$@"
	fi
}

((print)) || need docker
export DOCKER_BUILDKIT=1
for t in "${targets[@]}"; do
	case $t in
	agentd)
		run docker build --file "$wsb_top/images/agentd.Dockerfile" \
			--build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" \
			--build-arg "AGENTD_IMAGE=$AGENTD_IMAGE" \
			--build-arg "AGENTD_TAG=$AGENTD_TAG" \
			-t "$AGENTD_IMAGE:$AGENTD_TAG" "$wsb_top"
		;;
	kind-node)
		run docker build --file "$wsb_top/images/kind-node-gvisor.Dockerfile" \
			--build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" \
			--build-arg "KIND_NODE_IMAGE=$KIND_NODE_IMAGE" \
			--build-arg "GVISOR_RELEASE=$GVISOR_RELEASE" \
			--build-arg "GVISOR_RUNSC_SHA512_X86_64=$GVISOR_RUNSC_SHA512_X86_64" \
			--build-arg "GVISOR_SHIM_SHA512_X86_64=$GVISOR_SHIM_SHA512_X86_64" \
			--build-arg "GVISOR_RUNSC_SHA512_AARCH64=$GVISOR_RUNSC_SHA512_AARCH64" \
			--build-arg "GVISOR_SHIM_SHA512_AARCH64=$GVISOR_SHIM_SHA512_AARCH64" \
			-t "$KIND_GVISOR_NODE_IMAGE" "$wsb_top"
		;;
	esac
done
