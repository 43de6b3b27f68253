# syntax=docker/dockerfile:1
# SPDX-License-Identifier: Apache-2.0
#
# The agentd image: agentd serving /workspace as uid 10001, under tini.
#
# Build it with images/build.sh, from the top of the source tree (the build
# context is the tree; images/agentd.Dockerfile.dockerignore keeps it to the
# sources agentd needs). build.sh passes every ARG below from
# images/image.env; the defaults here are copies for a bare
# `docker build -f images/agentd.Dockerfile .`, and tests/deploy checks that
# they equal images/image.env.
#
# Run it (agentd refuses a non-loopback listener without a token; --user lets
# it read your 0600 token file and write ./ws):
#   docker run --rm --user "$(id -u):$(id -g)" -p 127.0.0.1:9000:9000 \
#     -v "$PWD/ws:/workspace" -v "$PWD/token:/run/secrets/agentd-token:ro" \
#     wsbridge/agentd:0.1.0 --listen 0.0.0.0:9000 --token-file /run/secrets/agentd-token
# or reach it with no listener at all:
#   wsfs --exec 'docker exec -i CONTAINER agentd --root /workspace --stdio' MNT

# Debian 12 point release, pinned by tag. Pin the digest too for a
# reproducible build: DEBIAN_IMAGE=debian:12.11-slim@sha256:... in image.env.
ARG DEBIAN_IMAGE=debian:12.11-slim

# ---- build: meson + ninja, only the two binaries the image ships ----
FROM ${DEBIAN_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
# The build dependencies of agentd and wsctl (deploy/local/up.sh has the full
# developer list). libfuse3-dev only because fusefs/meson.build requires fuse3
# at configure time; wsfs itself is not built. Both binaries are linked
# statically (agentd/meson.build, fusefs/meson.build: a fast start for each
# `kubectl exec -i POD -- agentd --stdio`): libstdc++-12-dev for libstdc++.a
# (gRPC is C++), the -dev packages for the other .a files.
RUN apt-get update \
	&& apt-get install -y --no-install-recommends \
		gcc libc6-dev libstdc++-12-dev binutils meson ninja-build pkg-config \
		libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev libfuse3-dev \
	&& rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY meson.build meson_options.txt ./
COPY proto/ proto/
COPY agentd/ agentd/
COPY fusefs/ fusefs/
# "enabled", not the default "auto": a build that cannot link statically
# fails here instead of making binaries the runtime stage cannot run.
RUN meson setup /build --buildtype=release -Dtests=false \
		-Dstatic_agentd=enabled -Dstatic_wsctl=enabled \
	&& ninja -C /build agentd/agentd fusefs/wsctl \
	&& strip /build/agentd/agentd /build/fusefs/wsctl \
	&& if readelf -d /build/agentd/agentd /build/fusefs/wsctl | grep -q NEEDED; then \
		echo "agentd or wsctl is linked dynamically" >&2; exit 1; fi \
	&& /build/agentd/agentd --version

# ---- runtime: agentd and wsctl (static), tini, nothing else ----
FROM ${DEBIAN_IMAGE}
ARG DEBIAN_IMAGE
ARG AGENTD_IMAGE=wsbridge/agentd
ARG AGENTD_TAG=0.1.0
ARG DEBIAN_FRONTEND=noninteractive
LABEL org.opencontainers.image.title="agentd" \
	org.opencontainers.image.description="wsbridge agentd: serves /workspace and runs commands in it over gRPC" \
	org.opencontainers.image.ref.name="${AGENTD_IMAGE}:${AGENTD_TAG}" \
	org.opencontainers.image.version="${AGENTD_TAG}" \
	org.opencontainers.image.licenses="Apache-2.0" \
	org.opencontainers.image.base.name="${DEBIAN_IMAGE}"
# Runtime packages: none for the binaries (no NEEDED entry; getaddrinfo()'s
# NSS modules are libc6's, in the base). tini reaps orphans as PID 1 (agentd
# does not) and forwards signals (-g: to the whole process group). dmesg
# (util-linux, in the base) is what proves gVisor: under runsc it prints
# "Starting gVisor...".
RUN apt-get update \
	&& apt-get install -y --no-install-recommends tini \
	&& rm -rf /var/lib/apt/lists/* \
	&& groupadd --gid 10001 agent \
	&& useradd --uid 10001 --gid 10001 --home-dir /workspace --no-create-home \
		--shell /bin/sh agent \
	&& install -d -o 10001 -g 10001 -m 0750 /workspace
COPY --from=build /build/agentd/agentd /build/fusefs/wsctl /usr/local/bin/
USER 10001:10001
WORKDIR /workspace
ENV HOME=/workspace
EXPOSE 9000
# grpc.health.v1.Health/Check on the default listener: Debian has no
# grpc_health_probe, so wsctl (built above from the same tree) asks; it exits
# 0 only for SERVING. Docker only: Kubernetes ignores HEALTHCHECK and uses the
# manifests' gRPC readiness probe. A container started with --stdio has no
# listener and reports unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=5s --retries=3 \
	CMD ["/usr/local/bin/wsctl", "--addr", "127.0.0.1:9000", "--rpc-timeout", "3", "health"]
ENTRYPOINT ["/usr/bin/tini", "-g", "--", "/usr/local/bin/agentd", "--root", "/workspace"]
CMD []
