#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/fs.sh: the wsfs file-system benchmark. Runs the same workloads, in one
# run, on a local directory, on libfuse's passthrough_ll (a plain local FUSE
# file system), on wsfs over loopback (agentd on a unix socket, and on TCP
# 127.0.0.1), and on sshfs over a throwaway sshd on 127.0.0.1, then prints
# the median of each figure and the ratios. Everything stays on this machine;
# every mount, daemon and temp dir is removed on exit, Ctrl-C included.
#
# Not a test: never run it from meson test or CI. Needs root for apt-get and
# for dropping the page cache (without root the "cold" reads are warm and the
# table says so). See bench/README.md for what each workload does.

set -Eeu -o pipefail
export LC_ALL=C
trap 'echo "fs.sh: line $LINENO: \"$BASH_COMMAND\" failed (exit $?)" >&2' ERR

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)

ALL_TARGETS="local passthrough wsfs wsfs-tcp sshfs"

usage() {
	cat <<EOF
Usage: bench/fs.sh [OPTION]...
Benchmark wsfs against a local directory, a local FUSE passthrough and sshfs.

  --only LIST        comma-separated targets out of: ${ALL_TARGETS// /,}
                     (default: all; wsfs targets are skipped if not built)
  --quick            small sizes (a ~500-file tree, 64 MiB I/O), 1-2 min
  --reps N           repeat every timing N times, report the median (default 3)
  --build DIR        wsbridge build dir with agentd/agentd and fusefs/wsfs
                     (default: \$WSB_BUILD, else $REPO/build)
  --tree DIR         directory to tar up as the source tree (default: the
                     /usr/include files of libc6-dev, linux-libc-dev,
                     libstdc++-dev and wsbridge's build dependencies)
  --wsfs-opts OPTS   extra -o options for wsfs
  --md FILE          write the markdown table here
                     (default: \${TMPDIR:-/tmp}/wsbridge-fs-bench.md)
  --tmpdir DIR       where to make the scratch dir (default \${TMPDIR:-/tmp});
                     it must be on a disk, not tmpfs, for cold reads to mean much
  --no-install       do not apt-get install missing packages
  -h, --help         show this help
EOF
}

# ---------------------------------------------------------------- options --

ONLY=""
QUICK=0
REPS=3
BUILD=${WSB_BUILD:-$REPO/build}
TREE=""   # default: see TREE_PKGS
# Packages whose /usr/include files make the default source tree.
TREE_PKGS=(libc6-dev linux-libc-dev 'libstdc++-*-dev' libgrpc-dev libprotobuf-c-dev libuv1-dev
	libfuse3-dev libcmocka-dev libssl-dev libabsl-dev zlib1g-dev libc-ares-dev libre2-dev)
WSFS_OPTS=""
MD_OUT=${TMPDIR:-/tmp}/wsbridge-fs-bench.md
SCRATCH_PARENT=${TMPDIR:-/tmp}
INSTALL=1

while [ $# -gt 0 ]; do
	case $1 in
	--only) ONLY=${2:?--only needs a list}; shift 2 ;;
	--only=*) ONLY=${1#*=}; shift ;;
	--quick) QUICK=1; shift ;;
	--reps) REPS=${2:?--reps needs N}; shift 2 ;;
	--reps=*) REPS=${1#*=}; shift ;;
	--build) BUILD=${2:?--build needs a dir}; shift 2 ;;
	--build=*) BUILD=${1#*=}; shift ;;
	--tree) TREE=${2:?--tree needs a dir}; shift 2 ;;
	--tree=*) TREE=${1#*=}; shift ;;
	--wsfs-opts) WSFS_OPTS=${2?}; shift 2 ;;
	--wsfs-opts=*) WSFS_OPTS=${1#*=}; shift ;;
	--md) MD_OUT=${2:?--md needs a file}; shift 2 ;;
	--md=*) MD_OUT=${1#*=}; shift ;;
	--tmpdir) SCRATCH_PARENT=${2:?--tmpdir needs a dir}; shift 2 ;;
	--tmpdir=*) SCRATCH_PARENT=${1#*=}; shift ;;
	--no-install) INSTALL=0; shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "fs.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
	esac
done

case $REPS in
''|*[!0-9]*|0) echo "fs.sh: --reps wants a positive integer, got '$REPS'" >&2; exit 2 ;;
esac

if [ "$QUICK" = 1 ]; then
	NCREATE=500        # small files created
	SEQ_MIB=64         # sequential write / cold read size
	RAND_MIB=64        # region the random reads cover
	RAND_IOS=5000      # random reads per run (each a distinct 4 KiB block)
else
	NCREATE=2000
	SEQ_MIB=512
	RAND_MIB=256
	RAND_IOS=10000
fi
RAND_SECS=10           # cap on one random-read run
GIT_STATUS_RUNS=5      # timed `git status` runs per repetition (after one warm-up)

say() { printf '%s\n' "$*" >&2; }
die() { say "fs.sh: $*"; exit 1; }

# Targets to run, in table order.
TARGETS=()
if [ -n "$ONLY" ]; then
	for t in ${ONLY//,/ }; do
		case " $ALL_TARGETS " in
		*" $t "*) TARGETS+=("$t") ;;
		*) die "unknown target '$t' in --only (known: ${ALL_TARGETS// /,})" ;;
		esac
	done
else
	read -r -a TARGETS <<<"$ALL_TARGETS"
fi

has_target() { case " ${TARGETS[*]} " in *" $1 "*) return 0 ;; esac; return 1; }
drop_target() {
	local t keep=()
	for t in "${TARGETS[@]}"; do [ "$t" = "$1" ] || keep+=("$t"); done
	TARGETS=("${keep[@]}")
}

AGENTD=$BUILD/agentd/agentd
WSFS=$BUILD/fusefs/wsfs
WSCTL=$BUILD/fusefs/wsctl
NOTES=()   # lines for the report's notes
for t in wsfs wsfs-tcp; do
	if has_target "$t" && ! { [ -x "$WSFS" ] && [ -x "$AGENTD" ]; }; then
		say "fs.sh: skipping $t: $WSFS or $AGENTD not built"
		NOTES+=("$t skipped: \`$WSFS\` or \`$AGENTD\` not built.")
		drop_target "$t"
	fi
done
[ ${#TARGETS[@]} -gt 0 ] || die "no target left to run"

# -------------------------------------------------------------- packages --

need_pkgs=()
need_cmd() { # CMD PACKAGE
	command -v "$1" >/dev/null 2>&1 || need_pkgs+=("$2")
}
need_cmd tar tar
need_cmd git git
need_cmd cc gcc
need_cmd fio fio
need_cmd mountpoint util-linux
if has_target passthrough || has_target wsfs || has_target wsfs-tcp || has_target sshfs; then
	need_cmd fusermount3 fuse3
fi
if has_target passthrough; then
	need_cmd pkg-config pkg-config
	if ! pkg-config --exists fuse3 2>/dev/null ||
	   ! ls /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c* >/dev/null 2>&1; then
		need_pkgs+=(libfuse3-dev)
	fi
fi
if has_target sshfs; then
	need_cmd sshfs sshfs
	[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
	need_cmd ssh openssh-client
	need_cmd ssh-keygen openssh-client
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
	mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
	if [ "$INSTALL" = 1 ] && [ "$(id -u)" = 0 ]; then
		say "fs.sh: installing ${need_pkgs[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null ||
			die "apt-get update failed"
		apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null ||
			die "apt-get install ${need_pkgs[*]} failed"
	else
		die "missing packages: ${need_pkgs[*]} (install them, or run as root without --no-install)"
	fi
fi

# ------------------------------------------------------- state & cleanup --

mkdir -p "$SCRATCH_PARENT"
TMP=$(mktemp -d "$SCRATCH_PARENT/wsb-fsbench.XXXXXX")
declare -A MNT=()      # target -> mount point (the dir the workloads use)
declare -A BACK=()     # target -> backing dir on the local disk
declare -A FUSE_PID=() # target -> pid of its FUSE daemon while mounted
declare -A DAEMONS=()  # name -> pid of a server (agentd, sshd)
declare -A SAMPLES=()  # "target|workload" -> space-separated samples
declare -A FAILED=()   # "target|workload" -> 1 if a run failed
CREATED_RUN_SSHD=0

cleanup() {
	local rc=$? t n p i
	trap - EXIT INT TERM ERR
	set +e
	cd /
	for t in "${!FUSE_PID[@]}"; do
		unmount_target "$t" quiet
	done
	for n in "${!DAEMONS[@]}"; do
		p=${DAEMONS[$n]}
		kill -TERM "$p" 2>/dev/null
	done
	for n in "${!DAEMONS[@]}"; do
		p=${DAEMONS[$n]}
		for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ "$CREATED_RUN_SSHD" = 1 ] && rmdir /run/sshd 2>/dev/null
	if [ -n "${TMP:-}" ] && [ -d "$TMP" ]; then
		if grep -qF " $TMP/" /proc/self/mounts; then
			say "fs.sh: something is still mounted under $TMP; not removing it:"
			grep -F " $TMP/" /proc/self/mounts >&2
		else
			rm -rf --one-file-system "$TMP"
		fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'say "fs.sh: interrupted, cleaning up"; exit 130' INT
trap 'exit 143' TERM

# ----------------------------------------------------------------- timing --

# tic/toc: wall time in microseconds, no fork. DT holds the last interval.
tic() { T0=${EPOCHREALTIME/./}; }
toc() { local t1=${EPOCHREALTIME/./}; DT=$((t1 - T0)); [ "$DT" -gt 0 ] || DT=1; }

record() { # TARGET WORKLOAD VALUE
	SAMPLES["$1|$2"]+="$3 "
}
record_fail() { # TARGET WORKLOAD WHY: stderr of the command is in $ERR_FILE
	FAILED["$1|$2"]=1
	say "  !! $1: $2 failed: $3"
	if [ -s "$ERR_FILE" ]; then
		head -n 3 "$ERR_FILE" | sed 's/^/     /' >&2
	fi
	return 0
}

median() { # SAMPLES... -> median, or nothing
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2];
		      else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

COLD=1
if ! [ -w /proc/sys/vm/drop_caches ]; then
	COLD=0
	NOTES+=("Not root: the page cache was not dropped, so 'cold' reads are warm.")
fi
drop_caches() {
	sync
	if [ "$COLD" = 1 ] && ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
		COLD=0
		NOTES+=("Dropping the page cache failed: 'cold' reads after the first are warm.")
		say "fs.sh: cannot write /proc/sys/vm/drop_caches; cold reads will be warm"
	fi
	return 0
}

# ----------------------------------------------------------------- mounts --

LOGS=$TMP/logs
ERR_FILE=$LOGS/command.err   # stderr of the last timed command
mkdir -p "$LOGS"

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WSFS_FG=()
if [ -x "$WSFS" ] && "$WSFS" --help 2>&1 | grep -qE '(^|[[:space:]])-f([[:space:],]|$)'; then
	WSFS_FG=(-f)
fi

SSH_CIPHER=chacha20-poly1305@openssh.com
grep -qw aes /proc/cpuinfo && SSH_CIPHER=aes128-gcm@openssh.com
SSHFS_OPTS="Ciphers=$SSH_CIPHER,Compression=no,max_conns=4,kernel_cache,dir_cache=yes,dcache_timeout=60"
PT_OPTS=""   # passthrough_ll's defaults: cache=auto-like "normal", 1 s timeouts, no writeback

# start_fuse TARGET: mount TARGET's FUSE file system on MNT[TARGET] and wait
# until the mount is there. The daemon runs in the foreground (-f) in the
# background of this shell so that its pid is ours to wait for.
start_fuse() {
	local t=$1 mnt=${MNT[$1]} pid i
	case $t in
	passthrough)
		"$TMP/passthrough_ll" -f -o "source=${BACK[$t]}${PT_OPTS:+,$PT_OPTS}" "$mnt" \
			>>"$LOGS/$t.log" 2>&1 &
		;;
	wsfs)
		"$WSFS" "${WSFS_FG[@]}" ${WSFS_OPTS:+-o "$WSFS_OPTS"} "unix:$TMP/agentd-unix.sock" "$mnt" \
			>>"$LOGS/$t.log" 2>&1 &
		;;
	wsfs-tcp)
		"$WSFS" "${WSFS_FG[@]}" ${WSFS_OPTS:+-o "$WSFS_OPTS"} "127.0.0.1:$AGENTD_TCP_PORT" "$mnt" \
			>>"$LOGS/$t.log" 2>&1 &
		;;
	sshfs)
		sshfs -f -F "$TMP/ssh/client_config" -o "$SSHFS_OPTS" "wsb-bench:${BACK[$t]}" "$mnt" \
			>>"$LOGS/$t.log" 2>&1 &
		;;
	*) return 0 ;;
	esac
	pid=$!
	FUSE_PID[$t]=$pid
	for i in $(seq 200); do
		mountpoint -q "$mnt" && return 0
		# A daemon that forks itself exits 0 once mounted; keep polling a bit.
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null || { show_log "$t"; die "$t: FUSE daemon exited before mounting $mnt"; }
		fi
		sleep 0.05
	done
	show_log "$t"
	die "$t: $mnt not mounted after 10 s"
}

# unmount_target TARGET [quiet]: fusermount3 -u, wait for the daemon to exit.
unmount_target() {
	local t=$1 mnt=${MNT[$1]:-} pid=${FUSE_PID[$1]:-} i
	[ -n "$pid" ] || return 0
	if mountpoint -q "$mnt" 2>/dev/null; then
		for i in $(seq 50); do
			fusermount3 -u "$mnt" 2>/dev/null && break
			sleep 0.1
		done
		if mountpoint -q "$mnt" 2>/dev/null; then
			[ "${2:-}" = quiet ] || say "fs.sh: $mnt busy; lazy unmount"
			fusermount3 -u -z "$mnt" 2>/dev/null || true
		fi
	fi
	for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	unset "FUSE_PID[$t]"
	return 0
}

# remount TARGET: drop every client-side cache of a FUSE target, then warm
# its connections up outside the measured tree: sshfs opens its max_conns
# SSH connections lazily, and a handshake is not what find or cc measure.
# Holding 8 files open at once makes sshfs start all of them.
remount() {
	local t=$1 m=${MNT[$1]} fds=() i fd
	[ "$t" = local ] && return 0
	unmount_target "$t"
	start_fuse "$t"
	for i in 1 2 3 4 5 6 7 8; do
		exec {fd}<"$m/warm/f$i"
		fds+=("$fd")
	done
	for fd in "${fds[@]}"; do exec {fd}<&-; done
}

setup_passthrough() {
	local ex=/usr/share/doc/libfuse3-dev/examples f
	mkdir -p "$TMP/pt-src"
	for f in passthrough_ll.c passthrough_helpers.h; do
		if [ -f "$ex/$f" ]; then cp "$ex/$f" "$TMP/pt-src/"
		elif [ -f "$ex/$f.gz" ]; then zcat "$ex/$f.gz" >"$TMP/pt-src/$f"
		elif [ "$f" = passthrough_ll.c ]; then die "no $ex/$f: install libfuse3-dev"
		fi
	done
	# shellcheck disable=SC2046
	cc -O2 -Wall -o "$TMP/passthrough_ll" "$TMP/pt-src/passthrough_ll.c" \
		$(pkg-config --cflags --libs fuse3) 2>"$LOGS/passthrough-build.log" ||
		{ show_log passthrough-build; die "could not compile passthrough_ll.c"; }
}

start_agentd() { # NAME LISTEN ROOT
	local name=$1 listen=$2 root=$3 i
	"$AGENTD" --root "$root" --listen "$listen" --log-level warning >>"$LOGS/$name.log" 2>&1 &
	DAEMONS[$name]=$!
	for i in $(seq 100); do
		if [ -x "$WSCTL" ]; then
			"$WSCTL" -a "$listen" health >/dev/null 2>&1 && return 0
		else
			case $listen in
			unix:*) [ -S "${listen#unix:}" ] && return 0 ;;
			*) (exec 3<>"/dev/tcp/${listen%:*}/${listen##*:}") 2>/dev/null && return 0 ;;
			esac
		fi
		kill -0 "${DAEMONS[$name]}" 2>/dev/null || { show_log "$name"; die "$name exited at start"; }
		sleep 0.1
	done
	show_log "$name"
	die "$name does not answer on $listen"
}

setup_sshd() {
	start_sshd 'Subsystem sftp internal-sftp' ''
	wait_ssh ssh -F "$SSH_DIR/client_config"
}

# --------------------------------------------------------- the source tree --

mkdir -p "$TMP/home"
export HOME=$TMP/home GIT_CONFIG_NOSYSTEM=1
cat >"$HOME/.gitconfig" <<'EOF'
[user]
	name = wsbridge bench
	email = bench@localhost
[init]
	defaultBranch = main
[gc]
	auto = 0
[safe]
	directory = *
[core]
	fsmonitor = false
EOF

GCC_INC=$(cc -print-file-name=include)
MULTIARCH=$(cc -print-multiarch 2>/dev/null || true)
TARBALL=$TMP/tree.tar

# cc_deps INCLUDE_DIR: the headers many_includes.c opens with INCLUDE_DIR as
# its only include path besides gcc's own, one absolute path a line.
cc_deps() {
	# shellcheck disable=SC1003
	cc -M -nostdinc -isystem "$GCC_INC" ${MULTIARCH:+-isystem "$1/$MULTIARCH"} \
		-isystem "$1" "$SCRIPT_DIR/many_includes.c" |
		tr -s ' \\' '\n' | grep "^$1/" | sort -u
}

# The tree is a list of paths relative to TREE_PARENT, tarred without
# symlinks: sshfs (contain_symlinks) and agentd refuse some symlinks (absolute
# ones, or ones leading out of the tree), and a workload that fails on one
# target compares nothing.
if [ -n "$TREE" ]; then
	[ -d "$TREE" ] || die "--tree $TREE is not a directory"
	TREE=$(cd "$TREE" && pwd)
	TREE_PARENT=$(dirname "$TREE")
	TOP=$(basename "$TREE")
	TREE_DESC="$TREE"
	(cd "$TREE_PARENT" && find "$TOP" ! -type l -print0 | sort -z) >"$TMP/tree.list"
elif [ "$QUICK" = 1 ]; then
	TREE_PARENT=/usr TOP=include
	TREE_DESC="the headers the compile opens from /usr/include"
	cc_deps /usr/include | sed 's|^/usr/||' | tr '\n' '\0' >"$TMP/tree.list"
else
	# /usr/include as installed by the C toolchain and wsbridge's build
	# dependencies: the same tree on every machine that builds wsbridge.
	TREE_PARENT=/usr TOP=include
	TREE_DESC="the /usr/include files of: "
	pkgs=$(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' "${TREE_PKGS[@]}" 2>/dev/null |
		awk '$1 == "ii" { print $2 }' | sort -u | tr '\n' ' ') || true
	[ -n "$pkgs" ] || die "none of ${TREE_PKGS[*]} is installed (use --tree DIR)"
	TREE_DESC+=${pkgs% }
	# shellcheck disable=SC2086
	dpkg -L $pkgs | grep '^/usr/include/' | sort -u | while IFS= read -r f; do
		[ -f "$f" ] && ! [ -L "$f" ] && printf '%s\0' "${f#/usr/}"
	done >"$TMP/tree.list"
fi
tar -C "$TREE_PARENT" -cf "$TARBALL" --null --no-recursion -T "$TMP/tree.list"

# Unpack it once locally: count it, and check that the compile works there.
mkdir "$TMP/probe"
tar -xf "$TARBALL" -C "$TMP/probe"
NFILES=$(find "$TMP/probe" ! -type d | wc -l)
NDIRS=$(find "$TMP/probe" -mindepth 1 -type d | wc -l)
TREE_MB=$(du -s --apparent-size --block-size=1000000 "$TMP/probe/$TOP" | cut -f1)
TREE_SUMMARY="$NFILES files in $NDIRS directories, $TREE_MB MB"
say "fs.sh: source tree: $TREE_SUMMARY ($TREE_DESC)"

# The compile workload reads every header from the tree on the target when
# the tree is a /usr/include; only gcc's own few headers ($GCC_INC) stay local.
if [ "$TREE_PARENT/$TOP" = /usr/include ]; then
	TREE_INC=1
else
	TREE_INC=0
	NOTES+=("--tree is not /usr/include: the compile reads its headers from the local /usr/include.")
fi
compile_on() { # WORKDIR
	local w=$1 inc=$1/$TOP
	[ "$TREE_INC" = 1 ] || inc=/usr/include
	cc -c -O0 -nostdinc -isystem "$GCC_INC" ${MULTIARCH:+-isystem "$inc/$MULTIARCH"} \
		-isystem "$inc" "$w/many_includes.c" -o "$w/many_includes.o"
}
cp "$SCRIPT_DIR/many_includes.c" "$TMP/probe/"
compile_on "$TMP/probe" 2>"$LOGS/probe-cc.log" ||
	{ show_log probe-cc; die "many_includes.c does not compile against the tree"; }
if [ "$TREE_INC" = 1 ]; then
	NHEADERS=$(cc_deps "$TMP/probe/$TOP" | wc -l)
else
	NHEADERS=$(cc_deps /usr/include | wc -l)
fi
rm -rf "$TMP/probe"

# ----------------------------------------------------------------- setup --

for t in "${TARGETS[@]}"; do
	case $t in
	local)
		BACK[$t]=$TMP/local
		MNT[$t]=$TMP/local
		;;
	*)
		BACK[$t]=$TMP/$t-back
		MNT[$t]=$TMP/$t-mnt
		;;
	esac
	mkdir -p "${BACK[$t]}/warm" "${MNT[$t]}"
	for i in 1 2 3 4 5 6 7 8; do echo "$i" >"${BACK[$t]}/warm/f$i"; done
done

if has_target passthrough; then setup_passthrough; fi
if has_target wsfs; then start_agentd agentd-unix "unix:$TMP/agentd-unix.sock" "${BACK[wsfs]}"; fi
if has_target wsfs-tcp; then
	AGENTD_TCP_PORT=$(free_port) || die "no free TCP port on 127.0.0.1"
	start_agentd agentd-tcp "127.0.0.1:$AGENTD_TCP_PORT" "${BACK[wsfs-tcp]}"
fi
if has_target sshfs; then setup_sshd; fi
for t in "${TARGETS[@]}"; do
	start_fuse "$t"
done

# ------------------------------------------------------------- workloads --

# Workload ids, in table order, with label, unit, and "rate" (higher is
# better) or "time" (lower is better), and the issue's target class: meta
# (>= 5x sshfs), seq (>= 3x sshfs) or - (no sshfs target). All: within 2x of
# passthrough.
WORKLOADS=(
	"untar|untar source tree|files/s|rate|meta"
	"find|find, client-cold|s|time|meta"
	"lsR|ls -lR, client-cold|s|time|-"
	"create|$NCREATE small file creates|files/s|rate|-"
	"gitadd|git add -A|s|time|-"
	"gitcommit|git commit|s|time|-"
	"gitstatus|git status, warm|ms|time|meta"
	"compile|cc -c, $NHEADERS headers, client-cold|s|time|-"
	"rmrf|rm -rf tree + .git|s|time|meta"
	"seqw|seq write $SEQ_MIB MiB + fsync|MB/s|rate|seq"
	"seqr|seq read $SEQ_MIB MiB, cold|MB/s|rate|seq"
	"randr|4 KiB random read, QD1|IOPS|rate|-"
)

secs() { awk -v us="$DT" 'BEGIN { printf "%.4f", us / 1e6 }'; }
per_sec() { awk -v n="$1" -v us="$DT" 'BEGIN { printf "%.1f", n * 1e6 / us }'; }

# run_meta TARGET REP: the source-tree workloads, in the order a user would.
run_meta() {
	local t=$1 rep=$2 w=${MNT[$1]}/w$2 i rc
	mkdir "$w"

	tic
	tar -xf "$TARBALL" -C "$w" 2>"$ERR_FILE" && rc=0 || rc=$?
	toc
	if [ "$rc" = 0 ]; then record "$t" untar "$(per_sec "$NFILES")"
	else record_fail "$t" untar "tar exit $rc"; fi

	remount "$t"
	tic; find "$w/$TOP" >/dev/null 2>"$ERR_FILE" && rc=0 || rc=$?; toc
	if [ "$rc" = 0 ]; then record "$t" find "$(secs)"; else record_fail "$t" find "exit $rc"; fi

	remount "$t"
	tic; ls -lR "$w/$TOP" >/dev/null 2>"$ERR_FILE" && rc=0 || rc=$?; toc
	if [ "$rc" = 0 ]; then record "$t" lsR "$(secs)"; else record_fail "$t" lsR "exit $rc"; fi

	mkdir "$w/small"
	rc=0
	tic
	for ((i = 0; i < NCREATE; i++)); do
		printf '%s\n' "$i" >"$w/small/f$i" || { rc=1; break; }
	done 2>"$ERR_FILE"
	toc
	if [ "$rc" = 0 ]; then record "$t" create "$(per_sec "$NCREATE")"; else record_fail "$t" create "a create failed"; fi

	git -C "$w/$TOP" init -q 2>"$ERR_FILE" || record_fail "$t" gitadd "git init failed"
	tic; git -C "$w/$TOP" add -A 2>"$ERR_FILE" && rc=0 || rc=$?; toc
	if [ "$rc" = 0 ]; then record "$t" gitadd "$(secs)"; else record_fail "$t" gitadd "exit $rc"; fi
	tic; git -C "$w/$TOP" commit -q -m bench >/dev/null 2>"$ERR_FILE" && rc=0 || rc=$?; toc
	if [ "$rc" = 0 ]; then record "$t" gitcommit "$(secs)"; else record_fail "$t" gitcommit "exit $rc"; fi
	git -C "$w/$TOP" status --porcelain >/dev/null 2>&1 || true   # warm-up
	for ((i = 0; i < GIT_STATUS_RUNS; i++)); do
		tic; git -C "$w/$TOP" status >/dev/null 2>"$ERR_FILE" && rc=0 || rc=$?; toc
		if [ "$rc" = 0 ]; then
			record "$t" gitstatus "$(awk -v us="$DT" 'BEGIN { printf "%.2f", us / 1e3 }')"
		else record_fail "$t" gitstatus "exit $rc"; break; fi
	done
	if [ "$t" = local ] && [ "$rep" = 1 ]; then
		RM_ENTRIES=$(find "$w" | wc -l)
	fi

	cp "$SCRIPT_DIR/many_includes.c" "$w/"
	remount "$t"
	tic; compile_on "$w" 2>"$ERR_FILE" && rc=0 || rc=$?; toc
	if [ "$rc" = 0 ]; then record "$t" compile "$(secs)"
	else record_fail "$t" compile "exit $rc"; fi

	tic; rm -rf "$w" 2>"$ERR_FILE" && rc=0 || rc=$?; toc
	if [ "$rc" = 0 ]; then record "$t" rmrf "$(secs)"; else record_fail "$t" rmrf "exit $rc"; fi
	return 0
}

# run_io TARGET REP: sequential write + fsync, cold sequential read, 4 KiB
# random reads with the server side warm and the client side cold.
run_io() {
	local t=$1 rep=$2 f=${MNT[$1]}/seq$2.bin b=${BACK[$1]}/seq$2.bin rc out iops
	tic
	dd if=/dev/zero of="$f" bs=1M count="$SEQ_MIB" conv=fsync status=none 2>"$ERR_FILE" &&
		rc=0 || rc=$?
	toc
	# MiB * 1048576 bytes / microseconds = 10^6 bytes/s
	if [ "$rc" = 0 ]; then record "$t" seqw "$(awk -v n="$SEQ_MIB" -v us="$DT" 'BEGIN { printf "%.1f", n * 1048576 / us }')"
	else record_fail "$t" seqw "dd exit $rc"; fi

	drop_caches
	remount "$t"
	tic; dd if="$f" of=/dev/null bs=1M status=none 2>"$ERR_FILE" && rc=0 || rc=$?; toc
	if [ "$rc" = 0 ]; then record "$t" seqr "$(awk -v n="$SEQ_MIB" -v us="$DT" 'BEGIN { printf "%.1f", n * 1048576 / us }')"
	else record_fail "$t" seqr "dd exit $rc"; fi

	cat "$b" >/dev/null       # server side warm
	remount "$t"              # client side cold
	out=$(fio --name=randread --filename="$f" --rw=randread --bs=4k --size="${RAND_MIB}M" \
		--ioengine=psync --iodepth=1 --numjobs=1 --number_ios="$RAND_IOS" \
		--runtime="$RAND_SECS" --invalidate=0 --output-format=terse --terse-version=3 \
		2>"$ERR_FILE") && rc=0 || rc=$?
	iops=$(printf '%s\n' "$out" | awk -F';' 'NF > 8 { print $8; exit }')
	if [ "$rc" = 0 ] && [ -n "$iops" ]; then record "$t" randr "$iops"
	else record_fail "$t" randr "fio exit $rc"; fi

	rm -f "$f"
	return 0
}

show_rep() { # TARGET: one progress line with this repetition's last samples
	local t=$1 line="" e id
	for e in "${WORKLOADS[@]}"; do
		IFS='|' read -r id _ _ _ _ <<<"$e"
		local s=${SAMPLES["$t|$id"]:-}
		s=${s% }
		line+=" $id=${s##* }"
	done
	say "  $t:$line"
}

say "fs.sh: targets: ${TARGETS[*]}; $REPS repetitions"
for ((rep = 1; rep <= REPS; rep++)); do
	say "fs.sh: repetition $rep/$REPS"
	for t in "${TARGETS[@]}"; do
		run_meta "$t" "$rep"
		run_io "$t" "$rep"
		show_rep "$t"
	done
done
ELAPSED=$SECONDS

# ---------------------------------------------------------------- report --

med() { # TARGET WORKLOAD -> median or empty
	local s=${SAMPLES["$1|$2"]:-}
	[ -n "$s" ] || return 0
	# shellcheck disable=SC2086
	median $s
}

fmt() { # NUMBER -> 3 significant digits, no exponent for ordinary sizes
	awk -v x="$1" 'BEGIN {
		if (x == "") { print "-"; exit }
		a = x < 0 ? -x : x
		if (a >= 100) printf "%.0f\n", x
		else if (a >= 10) printf "%.1f\n", x
		else if (a >= 1) printf "%.2f\n", x
		else printf "%.3g\n", x }'
}

# better_ratio KIND A B: how many times A is better than B (>1: A better).
better_ratio() {
	awk -v k="$1" -v a="$2" -v b="$3" 'BEGIN {
		if (a == "" || b == "" || a + 0 == 0 || b + 0 == 0) { print ""; exit }
		if (k == "rate") printf "%.2f\n", a / b; else printf "%.2f\n", b / a }'
}

HAVE_WS=0; HAVE_SSH=0; HAVE_PT=0
has_target wsfs && HAVE_WS=1
has_target sshfs && HAVE_SSH=1
has_target passthrough && HAVE_PT=1

HDR=(workload unit)
for t in "${TARGETS[@]}"; do HDR+=("$t"); done
HDR+=("wsfs/sshfs" "passthrough/wsfs" "target")
ROWS=()
MISSES=()
for e in "${WORKLOADS[@]}"; do
	IFS='|' read -r id label unit kind class <<<"$e"
	row=("$label" "$unit")
	for t in "${TARGETS[@]}"; do
		v=$(med "$t" "$id")
		c=$(fmt "$v")
		[ -n "${FAILED["$t|$id"]:-}" ] && c="$c!"
		row+=("$c")
	done
	ws=""; ssh=""; pt=""
	[ "$HAVE_WS" = 1 ] && ws=$(med wsfs "$id")
	[ "$HAVE_SSH" = 1 ] && ssh=$(med sshfs "$id")
	[ "$HAVE_PT" = 1 ] && pt=$(med passthrough "$id")
	r1=$(better_ratio "$kind" "$ws" "$ssh")       # >1: wsfs faster than sshfs
	r2=$(better_ratio "$kind" "$pt" "$ws")        # >1: wsfs slower than passthrough
	row+=("${r1:--}" "${r2:--}")
	want=""
	case $class in meta) want=5 ;; seq) want=3 ;; esac
	verdict=""
	if [ -n "$want" ]; then
		verdict=">=${want}x sshfs"
		if [ -n "$r1" ]; then
			if awk -v r="$r1" -v w="$want" 'BEGIN { exit !(r >= w) }'; then verdict+=" ok"
			else
				# How far the same workload gets over sshfs with no
				# network (passthrough) and with no FUSE (local) in
				# this run: below the goal, no FUSE client here
				# (or no file system at all) reaches it.
				ceil=""
				[ "$HAVE_PT" = 1 ] && c=$(better_ratio "$kind" "$pt" "$ssh") &&
					[ -n "$c" ] && ceil="passthrough ${c}x"
				l=$(med local "$id")
				c=$(better_ratio "$kind" "$l" "$ssh")
				[ -n "$c" ] && ceil="${ceil:+$ceil, }local ${c}x"
				verdict+=" MISS${ceil:+ ($ceil)}"
				MISSES+=("$label: wsfs/sshfs $r1 (wants >= $want${ceil:+; $ceil sshfs})")
			fi
		fi
		verdict+=", "
	fi
	verdict+="<=2x pt"
	if [ -n "$r2" ]; then
		if awk -v r="$r2" 'BEGIN { exit !(r <= 2) }'; then verdict+=" ok"
		else verdict+=" MISS"; MISSES+=("$label: passthrough/wsfs $r2 (wants <= 2)"); fi
	fi
	row+=("$verdict")
	ROWS+=("$(IFS=$'\t'; echo "${row[*]}")")
done

# Plain table on stdout.
{
	(IFS=$'\t'; echo "${HDR[*]}")
	printf '%s\n' "${ROWS[@]}"
} | column -t -s $'\t' -o ' | '

KERNEL=$(uname -r)
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
NCPU=$(nproc)
FS_UNDER=$(findmnt -n -o FSTYPE -T "$TMP" 2>/dev/null || stat -f -c %T "$TMP")
WSB_REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
SSHFS_VER=$(sshfs --version 2>&1 | awk '/SSHFS version/ { print $3 }' || true)

{
	echo "Results of \`bench/fs.sh$([ "$QUICK" = 1 ] && echo ' --quick')\`, $(date -u +%Y-%m-%d), wsbridge $WSB_REV:"
	echo "median of $REPS runs each (git status: of $((REPS * GIT_STATUS_RUNS)));"
	echo "$NCPU × $CPU, Linux $KERNEL, backing store $FS_UNDER; the run took ${ELAPSED} s."
	echo
	printf '| %s ' "${HDR[@]}"; echo '|'
	printf '|'; for _ in "${HDR[@]}"; do printf -- ' --- |'; done; echo
	for r in "${ROWS[@]}"; do
		echo "| ${r//$'\t'/ | } |"
	done
	echo
	echo "wsfs/sshfs > 1: wsfs is that many times faster than sshfs. passthrough/wsfs > 1:"
	echo "wsfs is that many times slower than passthrough_ll. \`!\`: at least one run failed."
	echo "Source tree: $TREE_SUMMARY: $TREE_DESC."
	if [ -n "${RM_ENTRIES:-}" ]; then
		echo "rm -rf removes $RM_ENTRIES entries (the tree, its .git, the small files)."
	fi
	[ "$HAVE_SSH" = 1 ] && echo "sshfs $SSHFS_VER: \`-o $SSHFS_OPTS\` to a throwaway sshd on 127.0.0.1:$SSHD_PORT (\`Subsystem sftp internal-sftp\`)."
	[ "$HAVE_PT" = 1 ] && echo "passthrough: libfuse's example passthrough_ll, default options (cache=auto, 1 s timeouts, no writeback, multi-threaded)."
	if [ "$HAVE_WS" = 1 ] || has_target wsfs-tcp; then
		echo "wsfs: \`wsfs ${WSFS_FG[*]}${WSFS_OPTS:+ -o $WSFS_OPTS} ADDR MNT\` against agentd on unix:SOCK (wsfs) / 127.0.0.1:PORT (wsfs-tcp)."
	fi
	for n in "${NOTES[@]}"; do echo "$n"; done
} >"$MD_OUT"

say ""
say "fs.sh: $ELAPSED s; markdown table written to $MD_OUT"
if [ ${#MISSES[@]} -gt 0 ]; then
	say "fs.sh: targets missed:"
	printf '  %s\n' "${MISSES[@]}" >&2
fi
for n in "${NOTES[@]}"; do say "note: $n"; done
