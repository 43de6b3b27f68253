#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/exec.sh: the `wsctl exec` benchmark. Measures the round trip of
# `wsctl exec -- true` against agentd on a unix socket (and on TCP
# 127.0.0.1) beside `ssh` over a multiplexed ControlMaster connection to a
# throwaway sshd on 127.0.0.1, and beside running `true` locally; then the
# stdout throughput of `head -c SIZE /dev/zero` through wsctl exec and through
# ssh. Everything stays on this machine (unix sockets and loopback); agentd,
# sshd, the ssh master and the temp dir are removed on exit, Ctrl-C included.
#
# Not a test: never run it from meson test or CI. See bench/README.md.

set -Eeu -o pipefail
export LC_ALL=C
trap 'echo "exec.sh: line $LINENO: \"$BASH_COMMAND\" failed (exit $?)" >&2' ERR

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)

usage() {
	cat <<EOF
Usage: bench/exec.sh [OPTION]...
Benchmark \`wsctl exec\` against ssh (ControlMaster) and a local fork+exec.

  --runs N        round trips per target (default 500)
  --size BYTES    bytes pushed through stdout per throughput run
                  (default 1073741824 = 1 GiB)
  --reps N        throughput runs per target, median reported (default 3)
  --build DIR     wsbridge build dir with agentd/agentd and fusefs/wsctl
                  (default: \$WSB_BUILD, else $REPO/build)
  --no-tcp        skip the agentd-on-TCP-127.0.0.1 rows
  --md FILE       write the markdown table here
                  (default: \${TMPDIR:-/tmp}/wsbridge-exec-bench.md)
  -h, --help      show this help
EOF
}

RUNS=500
SIZE=1073741824
REPS=3
BUILD=${WSB_BUILD:-$REPO/build}
TCP=1
MD_OUT=${TMPDIR:-/tmp}/wsbridge-exec-bench.md

while [ $# -gt 0 ]; do
	case $1 in
	--runs) RUNS=${2:?--runs needs N}; shift 2 ;;
	--runs=*) RUNS=${1#*=}; shift ;;
	--size) SIZE=${2:?--size needs BYTES}; shift 2 ;;
	--size=*) SIZE=${1#*=}; shift ;;
	--reps) REPS=${2:?--reps needs N}; shift 2 ;;
	--reps=*) REPS=${1#*=}; shift ;;
	--build) BUILD=${2:?--build needs a dir}; shift 2 ;;
	--build=*) BUILD=${1#*=}; shift ;;
	--no-tcp) TCP=0; shift ;;
	--md) MD_OUT=${2:?--md needs a file}; shift 2 ;;
	--md=*) MD_OUT=${1#*=}; shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "exec.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
	esac
done

for v in RUNS SIZE REPS; do
	case ${!v} in
	''|*[!0-9]*|0) echo "exec.sh: --${v,,} wants a positive integer, got '${!v}'" >&2; exit 2 ;;
	esac
done

say() { printf '%s\n' "$*" >&2; }
die() { say "exec.sh: $*"; exit 1; }

AGENTD=$BUILD/agentd/agentd
WSCTL=$BUILD/fusefs/wsctl
[ -x "$AGENTD" ] || die "$AGENTD not built"
[ -x "$WSCTL" ] || die "$WSCTL not built"
[ -x /usr/sbin/sshd ] || die "no /usr/sbin/sshd (apt-get install openssh-server)"
for c in ssh ssh-keygen head wc awk column; do
	command -v "$c" >/dev/null 2>&1 || die "missing command: $c"
done
TRUE=$(command -v true)   # an external true: `true` alone is a bash builtin
case $TRUE in /*) ;; *) TRUE=/bin/true ;; esac
[ -x "$TRUE" ] || die "no external true"

# ------------------------------------------------------- state & cleanup --

TMP=$(mktemp -d "${TMPDIR:-/tmp}/wsb-execbench.XXXXXX")
LOGS=$TMP/logs
mkdir -p "$LOGS" "$TMP/root"
declare -A DAEMONS=()   # name -> pid (agentd, sshd)
CREATED_RUN_SSHD=0
SSH_MASTER=0

cleanup() {
	local rc=$? n p i
	trap - EXIT INT TERM ERR
	set +e
	cd /
	if [ "$SSH_MASTER" = 1 ]; then
		ssh -F "$TMP/ssh/client_config" -O exit wsb-bench >/dev/null 2>&1
	fi
	for n in "${!DAEMONS[@]}"; do kill -TERM "${DAEMONS[$n]}" 2>/dev/null; done
	for n in "${!DAEMONS[@]}"; do
		p=${DAEMONS[$n]}
		for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ "$CREATED_RUN_SSHD" = 1 ] && rmdir /run/sshd 2>/dev/null
	[ -n "${TMP:-}" ] && [ -d "$TMP" ] && rm -rf --one-file-system "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'say "exec.sh: interrupted, cleaning up"; exit 130' INT
trap 'exit 143' TERM

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------- agentd --

UNIX_ADDR=unix:$TMP/agentd.sock
LISTEN=(--listen "$UNIX_ADDR")
if [ "$TCP" = 1 ]; then
	AGENTD_TCP_PORT=$(free_port) || die "no free TCP port on 127.0.0.1"
	TCP_ADDR=127.0.0.1:$AGENTD_TCP_PORT
	LISTEN+=(--listen "$TCP_ADDR")
fi
"$AGENTD" --root "$TMP/root" "${LISTEN[@]}" --log-level warning >>"$LOGS/agentd.log" 2>&1 &
DAEMONS[agentd]=$!
ok=0
for i in $(seq 100); do
	if "$WSCTL" -a "$UNIX_ADDR" health >/dev/null 2>&1; then ok=1; break; fi
	kill -0 "${DAEMONS[agentd]}" 2>/dev/null || { show_log agentd; die "agentd exited at start"; }
	sleep 0.1
done
[ "$ok" = 1 ] || { show_log agentd; die "agentd does not answer on $UNIX_ADDR"; }

# ------------------------------------------------------------------ sshd --

SSH_CIPHER=aes128-gcm@openssh.com
start_sshd 'PrintMotd no
PrintLastLog no
MaxSessions 100' "	ControlMaster auto
	ControlPath $TMP/ssh/ctl
	ControlPersist 600"
d=$SSH_DIR
SSH=(ssh -F "$d/client_config" -S "$d/ctl")
# The first successful connection becomes the ControlMaster (warm-up);
# ControlPersist keeps it in the background.
wait_ssh "${SSH[@]}"
SSH_MASTER=1
"${SSH[@]}" -O check wsb-bench 2>>"$LOGS/ssh.log" || die "no ssh ControlMaster at $d/ctl"

# ----------------------------------------------------------------- timing --

# Each target is a command line run with stdin from /dev/null, stdout and
# stderr discarded; a failed run aborts the benchmark (a fast failure is not
# a round trip).
declare -A CMD=()
TARGETS=(local wsctl-unix)
CMD[local]="$TRUE"
CMD[wsctl-unix]="$WSCTL -a $UNIX_ADDR exec -- true"
if [ "$TCP" = 1 ]; then
	TARGETS+=(wsctl-tcp)
	CMD[wsctl-tcp]="$WSCTL -a $TCP_ADDR exec -- true"
fi
TARGETS+=(ssh-mux)
CMD[ssh-mux]="${SSH[*]} wsb-bench true"

declare -A P50=() P99=() MEAN=() MBPS=()

# latency TARGET: RUNS round trips (after 5 warm-ups), microseconds each.
latency() {
	local t=$1 i t0 t1 out=$TMP/lat-$1.txt
	local -a c
	read -r -a c <<<"${CMD[$t]}"
	for i in 1 2 3 4 5; do "${c[@]}" </dev/null >/dev/null 2>>"$LOGS/$t.err" || die "$t: warm-up run failed: $(tail -n 2 "$LOGS/$t.err")"; done
	: >"$out"
	for ((i = 0; i < RUNS; i++)); do
		t0=${EPOCHREALTIME/./}
		"${c[@]}" </dev/null >/dev/null 2>>"$LOGS/$t.err" || die "$t: run $i failed: $(tail -n 2 "$LOGS/$t.err")"
		t1=${EPOCHREALTIME/./}
		echo $((t1 - t0)) >>"$out"
	done
	# nearest-rank percentiles
	read -r "P50[$t]" "P99[$t]" "MEAN[$t]" < <(sort -n "$out" | awk '{ v[NR] = $1; s += $1 }
		END { i50 = int(NR * 0.50 + 0.999999); i99 = int(NR * 0.99 + 0.999999)
		      printf "%.3f %.3f %.3f\n", v[i50] / 1e3, v[i99] / 1e3, s / NR / 1e3 }')
	say "  $t: p50 ${P50[$t]} ms, p99 ${P99[$t]} ms, mean ${MEAN[$t]} ms"
}

# throughput TARGET: REPS runs of `head -c SIZE /dev/zero` whose stdout goes
# to `wc -c`; the count must equal SIZE. Median in MB/s (10^6 bytes/s).
throughput() {
	local t=$1 r t0 t1 n s=()
	local -a c
	case $t in
	local) c=(head -c "$SIZE" /dev/zero) ;;
	wsctl-unix) c=("$WSCTL" -a "$UNIX_ADDR" exec -- head -c "$SIZE" /dev/zero) ;;
	wsctl-tcp) c=("$WSCTL" -a "$TCP_ADDR" exec -- head -c "$SIZE" /dev/zero) ;;
	ssh-mux) c=("${SSH[@]}" wsb-bench head -c "$SIZE" /dev/zero) ;;
	relay) c=(bash -c "head -c $SIZE /dev/zero | cat | cat") ;; # SIZE is digits
	esac
	for ((r = 0; r < REPS; r++)); do
		t0=${EPOCHREALTIME/./}
		n=$("${c[@]}" </dev/null 2>>"$LOGS/$t.err" | wc -c) || die "$t: throughput run failed: $(tail -n 2 "$LOGS/$t.err")"
		t1=${EPOCHREALTIME/./}
		[ "$n" = "$SIZE" ] || die "$t: got $n bytes of $SIZE"
		s+=("$(awk -v n="$n" -v us=$((t1 - t0)) 'BEGIN { printf "%.1f", n / us }')")
	done
	MBPS[$t]=$(printf '%s\n' "${s[@]}" | sort -g | awk '{ v[NR] = $1 }
		END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
	say "  $t: ${s[*]} MB/s -> median ${MBPS[$t]}"
}

say "exec.sh: $RUNS round trips per target: ${TARGETS[*]}"
for t in "${TARGETS[@]}"; do latency "$t"; done
# relay: the same bytes through two plain relays (cat | cat) on this
# machine: the ceiling for any design that, like wsctl exec and ssh, relays
# a command's output through a server and a client process.
say "exec.sh: throughput, $SIZE bytes, median of $REPS"
for t in "${TARGETS[@]}" relay; do throughput "$t"; done
ELAPSED=$SECONDS

# ---------------------------------------------------------------- report --

HDR=(target "p50 ms" "p99 ms" "mean ms" "stdout MB/s")
ROWS=()
for t in "${TARGETS[@]}"; do
	ROWS+=("$t"$'\t'"${P50[$t]}"$'\t'"${P99[$t]}"$'\t'"${MEAN[$t]}"$'\t'"${MBPS[$t]}")
done
ROWS+=("relay (cat, cat)"$'\t'-$'\t'-$'\t'-$'\t'"${MBPS[relay]}")
D50=$(awk -v a="${P50[wsctl-unix]}" -v b="${P50[local]}" 'BEGIN { printf "%.3f", a - b }')
RTP=$(awk -v a="${MBPS[wsctl-unix]}" -v b="${MBPS[ssh-mux]}" 'BEGIN { printf "%.2f", a / b }')
V1=MISS; awk -v d="$D50" 'BEGIN { exit !(d <= 3) }' && V1=ok
V2=MISS; awk -v r="$RTP" 'BEGIN { exit !(r >= 3) }' && V2=ok
RATIOS=("wsctl-unix p50 - local p50: $D50 ms (target <= 3 ms: $V1)"
	"wsctl-unix / ssh-mux throughput: ${RTP}x (target >= 3x: $V2)"
	"ceiling here: relay / ssh-mux $(awk -v a="${MBPS[relay]}" -v b="${MBPS[ssh-mux]}" 'BEGIN { printf "%.2f", a / b }')x; wsctl-unix / relay $(awk -v a="${MBPS[wsctl-unix]}" -v b="${MBPS[relay]}" 'BEGIN { printf "%.2f", a / b }')")
if [ "$TCP" = 1 ]; then
	RATIOS+=("wsctl-tcp p50 - local p50: $(awk -v a="${P50[wsctl-tcp]}" -v b="${P50[local]}" 'BEGIN { printf "%.3f", a - b }') ms; wsctl-tcp / ssh-mux throughput: $(awk -v a="${MBPS[wsctl-tcp]}" -v b="${MBPS[ssh-mux]}" 'BEGIN { printf "%.2f", a / b }')x")
fi

{
	(IFS=$'\t'; echo "${HDR[*]}")
	printf '%s\n' "${ROWS[@]}"
} | column -t -s $'\t' -o ' | '
printf '%s\n' "${RATIOS[@]}"

KERNEL=$(uname -r)
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
NCPU=$(nproc)
WSB_REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
SSH_VER=$(ssh -V 2>&1)
{
	echo "Results of \`bench/exec.sh --runs $RUNS --size $SIZE\`, $(date -u +%Y-%m-%d), wsbridge $WSB_REV:"
	echo "$RUNS round trips per target, throughput median of $REPS; $NCPU × $CPU, Linux $KERNEL;"
	echo "load average before the report: $(cut -d' ' -f1-3 /proc/loadavg); the run took ${ELAPSED} s."
	echo
	printf '| %s ' "${HDR[@]}"; echo '|'
	printf '|'; for _ in "${HDR[@]}"; do printf -- ' --- |'; done; echo
	for r in "${ROWS[@]}"; do echo "| ${r//$'\t'/ | } |"; done
	echo
	for r in "${RATIOS[@]}"; do echo "- $r"; done
	echo
	echo "local: \`$TRUE\` forked from bash. ssh-mux: $SSH_VER, \`ssh -S CTL host true\` over a"
	echo "ControlMaster connection (ControlPersist) to a throwaway sshd on 127.0.0.1, Ciphers $SSH_CIPHER."
	echo "Throughput: \`head -c $SIZE /dev/zero\` on the far side, stdout piped to \`wc -c\` here;"
	echo "relay: \`head -c $SIZE /dev/zero | cat | cat | wc -c\`, the ceiling for two relaying processes."
} >"$MD_OUT"
say "exec.sh: $ELAPSED s; markdown table written to $MD_OUT"
