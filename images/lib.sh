# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
#
# Shared by images/*.sh and deploy/*/*.sh (sourced, never run).
#
#   wsb_top        the source tree's top directory
#   wsb_load_env   export the variables of images/image.env (KEY=VALUE lines
#                  only; anything else is an error, so the file stays readable
#                  by bash, Python and docker --build-arg alike)
#   say, die       progress and fatal messages on stderr
#   need CMD...    fail unless every CMD is on PATH, naming the missing ones

wsb_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf '==> %s\n' "$*" >&2; }
die() {
	printf '%s: %s\n' "${0##*/}" "$*" >&2
	exit 1
}

need() {
	local c missing=()
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || missing+=("$c")
	done
	((${#missing[@]} == 0)) || die "needs ${missing[*]} on PATH (see docs/deploy.md, Prerequisites)"
}

# wsb_load_env: export every KEY=VALUE of images/image.env.
wsb_load_env() {
	local file=$wsb_top/images/image.env line key value n=0
	[[ -r $file ]] || die "cannot read $file"
	while IFS= read -r line || [[ -n $line ]]; do
		n=$((n + 1))
		[[ -z $line || $line == \#* ]] && continue
		if [[ ! $line =~ ^([A-Z][A-Z0-9_]*)=([^[:space:]\"\'\$\`]+)$ ]]; then
			die "$file:$n: not a KEY=VALUE line: $line"
		fi
		key=${BASH_REMATCH[1]}
		value=${BASH_REMATCH[2]}
		export "$key=$value"
	done <"$file"
}
