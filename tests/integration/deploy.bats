#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# The deployment files, checked offline (tests/deploy/check.sh: no cluster, no
# Docker, no network): first on the tree as it is, then each check broken on
# purpose in a copy of the tree, to see that it fails and says why.
#
# Needs: python3-yaml, python3-jsonschema, shellcheck (Debian 12). kubectl
# 1.21 or newer is used when present (kubectl kustomize), else the fallback
# renderer; the fault tests always use the fallback (faster, and the same
# objects: the compare test holds the two together).

bats_require_minimum_version 1.5.0

setup_file() {
	export SRC="${WSB_SRC:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
	export CHECK="$SRC/tests/deploy/check.sh"
}

# A copy of what the checks read, in $TREE, to break.
copy_tree() {
	TREE="$BATS_TEST_TMPDIR/tree"
	mkdir -p "$TREE/tests" "$TREE/docs"
	cp -r "$SRC/images" "$SRC/deploy" "$SRC/meson.build" "$TREE/"
	cp -r "$SRC/tests/deploy" "$TREE/tests/"
	cp "$SRC/docs/deploy.md" "$TREE/docs/"
	export WSB_KUSTOMIZE_ENGINE=python
}

# expect_fail CHECK TEXT: the check fails on $TREE, and says TEXT.
expect_fail() {
	run "$CHECK" --root "$TREE" "$1"
	if [ "$status" -ne 1 ] || ! grep -qF -- "$2" <<<"$output"; then
		echo "check $1 on the broken tree: status $status (want 1), output (want '$2'):"
		echo "$output"
		return 1
	fi
}

# edit FILE PYTHON-EXPR: rewrite $TREE/FILE with s -> EXPR (s: its text), and
# fail if that changed nothing (the fault must really be injected).
edit() {
	/usr/bin/python3 - "$TREE/$1" "$2" <<-'EOF'
	import sys
	path, expr = sys.argv[1], sys.argv[2]
	s = open(path).read()
	new = eval(expr, {"s": s})
	if new == s:
	    sys.exit(f"fault not injected into {path}: {expr}")
	open(path, "w").write(new)
	EOF
}

# ---- the tree as it is

@test "deploy: kustomize renders deploy/kind and deploy/agent-sandbox" {
	run "$CHECK" render
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy: kubectl kustomize and the fallback renderer give the same objects" {
	run "$CHECK" compare
	echo "$output"
	[ "$status" -eq 0 ]
	if grep -q '^skip' <<<"$output"; then
		skip "no kubectl >= 1.21"
	fi
}

@test "deploy: every rendered object validates (schemas strict, policy)" {
	run "$CHECK" validate
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy: the example claim and claim.sh's claim validate" {
	run "$CHECK" claims
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy: the kind config, its containerd patch and runsc.toml" {
	run "$CHECK" kind-config
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy: image name, tag and pins are the same everywhere" {
	run "$CHECK" versions
	echo "$output"
	[ "$status" -eq 0 ]
	run "$SRC/images/sync.sh" --check
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy: the Dockerfiles (pinned bases, exec form, non-root, RUN scripts)" {
	run "$CHECK" dockerfiles
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy: the vendored CRDs are unchanged" {
	run "$CHECK" crds
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy: shellcheck passes on every script" {
	run "$CHECK" shellcheck
	echo "$output"
	[ "$status" -eq 0 ]
	if grep -q '^skip' <<<"$output"; then
		skip "shellcheck is not installed"
	fi
}

# ---- each check broken on purpose

@test "deploy fault: an unknown field in the Deployment is rejected" {
	copy_tree
	edit deploy/kind/deployment.yaml \
		's.replace("        imagePullPolicy: IfNotPresent\n", "        imagePullPolicy: IfNotPresent\n        imagePullPolicyy: Always\n")'
	expect_fail validate "'imagePullPolicyy' was unexpected"
}

@test "deploy fault: a wrong type in the SandboxTemplate's pod is rejected" {
	copy_tree
	edit deploy/agent-sandbox/sandboxtemplate.yaml 's.replace("containerPort: 9000", "containerPort: \"9000\"")'
	expect_fail validate "'9000' is not of type 'integer'"
}

@test "deploy fault: a v1alpha1 field in a v1beta1 SandboxClaim is rejected" {
	copy_tree
	edit deploy/agent-sandbox/claim.yaml 's.replace("  warmPoolRef:\n", "  sandboxTemplateRef:\n")'
	expect_fail claims "'warmPoolRef' is a required property"
}

@test "deploy fault: a pod without runtimeClassName (silently unsandboxed) is rejected" {
	copy_tree
	edit deploy/kind/deployment.yaml 's.replace("      runtimeClassName: gvisor\n", "")'
	expect_fail validate "runs under runc, unsandboxed"
}

@test "deploy fault: a weaker securityContext is rejected" {
	copy_tree
	edit deploy/agent-sandbox/sandboxtemplate.yaml \
		's.replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")'
	expect_fail validate "allowPrivilegeEscalation must be false"
}

@test "deploy fault: listening on 0.0.0.0 without --token-file is rejected" {
	copy_tree
	edit deploy/kind/deployment.yaml 's.replace("        - --token-file\n        - /var/run/secrets/wsbridge/token\n", "")'
	expect_fail validate "without --token-file"
}

@test "deploy fault: an extra verb in the client Role is rejected" {
	copy_tree
	edit deploy/agent-sandbox/rbac.yaml \
		's.replace("verbs: [\"get\", \"list\", \"watch\", \"patch\"]", "verbs: [\"get\", \"list\", \"watch\", \"patch\", \"update\"]")'
	expect_fail validate "want exactly"
}

@test "deploy fault: ingress from anywhere is rejected" {
	copy_tree
	edit deploy/kind/networkpolicy.yaml \
		's.replace("  - from:\n    - namespaceSelector:\n        matchLabels:\n          wsbridge.dev/agentd-client: \"true\"\n    ports:", "  - ports:")'
	expect_fail validate "admits every source"
}

@test "deploy fault: a workspace that is not a volumeClaimTemplate is rejected" {
	copy_tree
	edit deploy/agent-sandbox/sandboxtemplate.yaml 's.replace("  - metadata:\n      name: workspace\n", "  - metadata:\n      name: scratch\n")'
	expect_fail validate "suspend and resume lose the workspace"
}

@test "deploy fault: a kustomization naming a missing file does not render" {
	copy_tree
	edit deploy/kind/kustomization.yaml 's.replace("- service.yaml\n", "- service.yaml\n- ingress.yaml\n")'
	expect_fail render "'ingress.yaml': no such file"
}

@test "deploy fault: the fallback renderer refuses kustomization fields it does not implement" {
	copy_tree
	edit deploy/agent-sandbox/kustomization.yaml 's.replace("resources:\n", "commonLabels:\n  a: b\nresources:\n")'
	expect_fail render "found commonLabels"
}

@test "deploy fault: a misspelt kind config field is rejected" {
	copy_tree
	edit deploy/kind/kind-config.yaml 's.replace("    containerPath: /etc/containerd/runsc.toml\n    readOnly: true\n- role: worker", "    containerpath: /etc/containerd/runsc.toml\n    readOnly: true\n- role: worker", 1)'
	expect_fail kind-config "'containerpath' was unexpected"
}

@test "deploy fault: runsc's ConfigPath with no runsc.toml mounted there is rejected" {
	copy_tree
	edit deploy/kind/kind-config.yaml 's.replace("ConfigPath = \"/etc/containerd/runsc.toml\"", "ConfigPath = \"/etc/runsc.toml\"")'
	expect_fail kind-config "no extraMount puts runsc.toml at /etc/runsc.toml"
}

@test "deploy fault: a containerd patch that is not TOML is rejected" {
	copy_tree
	edit deploy/kind/kind-config.yaml 's.replace("runtime_type = \"io.containerd.runsc.v1\"", "runtime_type = io.containerd.runsc.v1")'
	expect_fail kind-config "is not TOML"
}

@test "deploy fault: a runsc.toml the shim would drop (non-string flag) is rejected" {
	copy_tree
	edit deploy/kind/runsc.toml 's.replace("network = \"sandbox\"", "network = \"sandbox\"\ndebug = true")'
	expect_fail kind-config "every value must be a string"
}

@test "deploy fault: a kustomization with another tag is found (images/sync.sh)" {
	copy_tree
	edit deploy/agent-sandbox/kustomization.yaml 's.replace("newTag: 0.1.0", "newTag: 0.0.9")'
	expect_fail versions "run images/sync.sh"
	run "$TREE/images/sync.sh" --check
	[ "$status" -eq 1 ]
	run "$TREE/images/sync.sh"
	[ "$status" -eq 0 ]
	run "$CHECK" --root "$TREE" versions
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "deploy fault: docs quoting another image tag are found" {
	copy_tree
	edit docs/deploy.md 's.replace("wsbridge/agentd:0.1.0", "wsbridge/agentd:0.2.0", 1)'
	expect_fail versions "docs/deploy.md:"
}

@test "deploy fault: a Dockerfile default that drifted from image.env is found" {
	copy_tree
	edit images/agentd.Dockerfile 's.replace("ARG AGENTD_TAG=0.1.0", "ARG AGENTD_TAG=0.0.9")'
	expect_fail versions "ARG AGENTD_TAG=0.0.9"
}

@test "deploy fault: a build script tag of its own is found" {
	copy_tree
	# shellcheck disable=SC2016 # the $ are the script's, not ours
	edit images/build.sh 's.replace("-t \"$AGENTD_IMAGE:$AGENTD_TAG\"", "-t \"$AGENTD_IMAGE:latest\"")'
	expect_fail versions "does not build -t wsbridge/agentd:0.1.0"
}

@test "deploy fault: a kind node image from another kind release is found" {
	copy_tree
	edit images/image.env 's.replace("kindest/node:v1.36.1@", "kindest/node:v1.35.0@")'
	expect_fail versions "a node image must match the kind CLI"
}

@test "deploy fault: a broken RUN script in a Dockerfile is found" {
	copy_tree
	edit images/kind-node-gvisor.Dockerfile 's.replace("\tdone; \\\n", "\tdone \\\n", 1)'
	expect_fail dockerfiles "RUN is not valid sh"
}

@test "deploy fault: an image running as root is found" {
	copy_tree
	edit images/agentd.Dockerfile 's.replace("USER 10001:10001\n", "")'
	expect_fail dockerfiles "runs as root"
}

@test "deploy fault: a changed vendored CRD is found" {
	copy_tree
	edit tests/deploy/schemas/agent-sandbox/extensions.agents.x-k8s.io_sandboxclaims.yaml 's + "\n"'
	expect_fail crds "differs from the vendored upstream file"
}

@test "deploy fault: a shellcheck finding fails the check" {
	command -v shellcheck >/dev/null || skip "shellcheck is not installed"
	copy_tree
	# shellcheck disable=SC2016 # the $ are the script's, not ours
	edit deploy/kind/down.sh 's.replace("need kind\n", "need kind\nfor f in $(ls $HOME); do echo $f; done\n")'
	export WSB_SHELLCHECK_DIRS=deploy
	expect_fail shellcheck "deploy/kind/down.sh"
}
