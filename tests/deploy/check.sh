#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The offline checks of the deployment files (no cluster, no Docker, no
# network), one by one or all:
#   crds        the vendored Agent Sandbox CRDs are unchanged (SOURCE.txt)
#   versions    image name, tag and pins agree: images/image.env, the
#               kustomizations (images/sync.sh --check), the rendered
#               manifests, the Dockerfiles' ARGs and labels, images/build.sh,
#               deploy/kind/up.sh (kind load), docs/deploy.md
#   dockerfiles the Dockerfiles: bases pinned by tag (image.env values), exec-form
#               ENTRYPOINT/CMD/HEALTHCHECK, a non-root final USER, and every RUN
#               script through sh -n and shellcheck (no Docker needed)
#   kind-config deploy/kind/kind-config.yaml (strict kind v1alpha4 schema), its
#               containerd patch (TOML) and runsc.toml
#   render      `kubectl kustomize` (or the fallback renderer) renders
#               deploy/kind and deploy/agent-sandbox
#   compare     kubectl kustomize and the fallback renderer agree (skipped
#               without kubectl >= 1.21)
#   validate    every rendered object against its schema, unknown fields
#               rejected, and wsbridge's policy (gVisor, securityContext, RBAC...)
#   claims      claim.yaml and what `claim.sh --print` makes, likewise
#   'shellcheck' every shell script under deploy/ images/ tests/ .ci/
#               (WSB_SHELLCHECK_DIRS narrows the directories)
#
# Usage: tests/deploy/check.sh [--root DIR] [CHECK]...   (default: all)
#   --root DIR  check another copy of the tree (the fault-injection tests do)
# Exit: 0 all passed, 1 a check failed, 2 usage. A skipped check prints
# "skip" and does not fail. Needs the Debian 12 packages python3-yaml,
# python3-jsonschema and shellcheck.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [[ ${1:-} == --root ]]; then
	root=$(cd "$2" && pwd) || exit 2
	shift 2
fi
py=${WSB_PYTHON:-/usr/bin/python3}
[[ -x $py ]] || py=python3
dc=("$py" "$here/deploycheck.py" --root "$root")
all=(crds versions dockerfiles kind-config render compare validate claims shellcheck)
(($#)) || set -- "${all[@]}"

# Scripts: *.sh, *.bash, *.bats and files with a sh/bash shebang, relative
# to the root.
scripts() {
	local d f
	for d in ${WSB_SHELLCHECK_DIRS:-deploy images tests .ci}; do
		[[ -d $root/$d ]] || continue
		while IFS= read -r -d '' f; do
			case $f in
			*.sh | *.bash | *.bats) printf '%s\n' "${f#"$root"/}" ;;
			*) head -n1 "$f" 2>/dev/null | grep -Eq '^#!.*\b(ba)?sh\b' && printf '%s\n' "${f#"$root"/}" ;;
			esac
		done < <(find "$root/$d" -type f -not -path '*/schemas/*' -print0 | sort -z)
	done
}

check_shellcheck() {
	command -v shellcheck >/dev/null || {
		echo "skip shellcheck: not installed (Debian package shellcheck)"
		return 0
	}
	local pending=() files=() f bad=0 out mine
	# Scripts whose owners still have findings to fix: checked and reported,
	# but not failing; a listed script that passes is noted, to leave the list.
	if [[ -f $root/tests/deploy/shellcheck-pending.txt ]]; then
		mapfile -t pending < <(grep -v '^#' "$root/tests/deploy/shellcheck-pending.txt" | grep .)
	fi
	mapfile -t files < <(scripts)
	((${#files[@]})) || {
		echo "FAIL shellcheck: no scripts found" >&2
		return 1
	}
	# A few shellcheck runs, one per CPU, each over a share of the files (much
	# faster than one run per file); -f gcc prefixes every finding with its file.
	local jobs tmp i j share
	jobs=$(nproc 2>/dev/null || echo 2)
	tmp=$(mktemp -d)
	for ((i = 0; i < jobs; i++)); do
		share=()
		for ((j = i; j < ${#files[@]}; j += jobs)); do
			share+=("${files[j]}")
		done
		((${#share[@]})) || continue
		(cd "$root" && shellcheck -x -P SCRIPTDIR -f gcc "${share[@]}" >"$tmp/$i" 2>&1) &
	done
	wait
	out=$(cat "$tmp"/*)
	rm -rf "$tmp"
	for f in "${files[@]}"; do
		mine=$(awk -v f="$f:" 'index($0, f) == 1' <<<"$out")
		if [[ " ${pending[*]} " == *" $f "* ]]; then
			if [[ -z $mine ]]; then
				echo "note $f: passes shellcheck now; take it off tests/deploy/shellcheck-pending.txt"
			else
				echo "pending $f: $(grep -c . <<<"$mine") findings (tests/deploy/shellcheck-pending.txt)"
			fi
		elif [[ -n $mine ]]; then
			printf 'FAIL %s\n' "$mine" >&2
			bad=1
		fi
	done
	((bad)) || echo "ok   shellcheck: ${#files[@]} scripts"
	return "$bad"
}

status=0
for c in "$@"; do
	case $c in
	crds | versions | dockerfiles | kind-config)
		"${dc[@]}" "$c" || status=1
		;;
	render)
		for d in deploy/kind deploy/agent-sandbox; do
			if out=$("${dc[@]}" render "$root/$d" 2>&1); then
				echo "ok   $d renders ($(grep -c '^kind:' <<<"$out") objects)"
			else
				printf 'FAIL %s: %s\n' "$d" "$out" >&2
				status=1
			fi
		done
		;;
	compare)
		"${dc[@]}" compare "$root/deploy/kind" "$root/deploy/agent-sandbox"
		r=$?
		((r == 0 || r == 77)) || status=1
		;;
	validate)
		"${dc[@]}" validate "$root/deploy/kind" "$root/deploy/agent-sandbox" || status=1
		;;
	claims)
		# claim.sh --print needs nothing but the tree.
		if claim=$(bash "$root/deploy/agent-sandbox/claim.sh" --print agent-check 2>&1); then
			"${dc[@]}" validate-files "$root/deploy/agent-sandbox/claim.yaml" - <<<"$claim" || status=1
		else
			printf 'FAIL deploy/agent-sandbox/claim.sh --print: %s\n' "$claim" >&2
			status=1
		fi
		;;
	shellcheck)
		check_shellcheck || status=1
		;;
	*)
		echo "unknown check '$c' (${all[*]})" >&2
		exit 2
		;;
	esac
done
exit "$status"
