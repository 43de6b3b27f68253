# syntax=docker/dockerfile:1
# SPDX-License-Identifier: Apache-2.0
#
# A kind node image with gVisor: kindest/node (pinned by images/image.env's
# KIND_NODE_IMAGE, tag and digest) plus runsc and containerd-shim-runsc-v1 of
# one pinned gVisor release, checked against pinned SHA-512 sums, and the shim
# config deploy/kind/runsc.toml at /etc/containerd/runsc.toml.
#
# containerd learns about the runsc runtime from deploy/kind/kind-config.yaml
# (containerdConfigPatches), which kind applies when it creates each node;
# the same config also bind-mounts deploy/kind/runsc.toml over the copy baked
# in here, so editing it needs a new cluster, not a new image.
#
# Build with images/build.sh from the top of the source tree (it passes every
# ARG from images/image.env and tags the result $KIND_GVISOR_NODE_IMAGE). The
# defaults below are copies, checked against image.env by tests/deploy.

ARG DEBIAN_IMAGE=debian:12.11-slim
ARG KIND_NODE_IMAGE=kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5

# ---- fetch: download and verify the two gVisor binaries ----
FROM ${DEBIAN_IMAGE} AS fetch
ARG DEBIAN_FRONTEND=noninteractive
ARG GVISOR_RELEASE=20260706.0
ARG GVISOR_RUNSC_SHA512_X86_64=73938c145ebe554cf61a01da455688f4b732eebdf7b1b635bdef5b195868b363d8cb400e3d92ed1f377b78996805556c247a4849583910cb04e92b156053033e
ARG GVISOR_SHIM_SHA512_X86_64=6f1b34266ed3ab503f6e88116dd97d0fb5f79311ea174059dd284de11b36ee062649da2fe3dccea9e2d25abe4df04bee5ee443ec0b9348ae44e63fabda28e8f8
ARG GVISOR_RUNSC_SHA512_AARCH64=a4962fe56ee62c841c270443a3617b6626db3fb282e65793f6762df78b3209304dfe2e094e524b3d2b4c781c05b1b95744ce9fe50b49edee43090b27c2956c4b
ARG GVISOR_SHIM_SHA512_AARCH64=2ddb4eacc5a30e2aadf882b6dfa86b579ce46861f0cd13bc415c18b88d9c4d8309ec0bc7ddfe741b2fb5747af6c9f2f736e2169c1a46fb6f1a227f4b8962a88b
# Set by BuildKit to the platform being built (amd64, arm64).
ARG TARGETARCH
RUN apt-get update \
	&& apt-get install -y --no-install-recommends ca-certificates curl \
	&& rm -rf /var/lib/apt/lists/*
WORKDIR /gvisor
# Two checks, both must pass: the release bucket's own .sha512 files (the
# documented install check; catches a truncated download), and the SHA-512
# pinned in images/image.env (catches a replaced release: the bucket's sums
# would move with it).
RUN set -eu; \
	case "${TARGETARCH:-amd64}" in \
	amd64) arch=x86_64; runsc_sha=${GVISOR_RUNSC_SHA512_X86_64}; shim_sha=${GVISOR_SHIM_SHA512_X86_64} ;; \
	arm64) arch=aarch64; runsc_sha=${GVISOR_RUNSC_SHA512_AARCH64}; shim_sha=${GVISOR_SHIM_SHA512_AARCH64} ;; \
	*) echo "gVisor publishes no binaries for ${TARGETARCH}" >&2; exit 1 ;; \
	esac; \
	url="https://storage.googleapis.com/gvisor/releases/release/${GVISOR_RELEASE}/${arch}"; \
	for f in runsc containerd-shim-runsc-v1; do \
		curl --proto '=https' --tlsv1.2 -fsSL --retry 3 -o "$f" "$url/$f"; \
		curl --proto '=https' --tlsv1.2 -fsSL --retry 3 -o "$f.sha512" "$url/$f.sha512"; \
	done; \
	sha512sum --check --strict runsc.sha512 containerd-shim-runsc-v1.sha512; \
	printf '%s  runsc\n%s  containerd-shim-runsc-v1\n' "$runsc_sha" "$shim_sha" \
		| sha512sum --check --strict -; \
	rm -f ./*.sha512; \
	chmod 0755 runsc containerd-shim-runsc-v1

# ---- the node image ----
FROM ${KIND_NODE_IMAGE}
ARG KIND_NODE_IMAGE
ARG GVISOR_RELEASE=20260706.0
LABEL org.opencontainers.image.title="kind node with gVisor" \
	org.opencontainers.image.description="kindest/node plus runsc and containerd-shim-runsc-v1 (gVisor ${GVISOR_RELEASE})" \
	org.opencontainers.image.base.name="${KIND_NODE_IMAGE}" \
	dev.gvisor.release="${GVISOR_RELEASE}"
COPY --from=fetch --chmod=0755 /gvisor/runsc /gvisor/containerd-shim-runsc-v1 /usr/local/bin/
COPY --chmod=0644 deploy/kind/runsc.toml /etc/containerd/runsc.toml
