# SPDX-License-Identifier: Apache-2.0
#
# Shared set-up for the whole-behaviour suites: where the binaries are, a free
# port per test, starting agentd (and anything else) in the background and
# stopping it in teardown, and assertions that print what differed.
#
# Environment (tests/meson.build sets both):
#   WSB_BUILD  meson build directory (agentd/agentd, fusefs/wsctl, proto/*_pb2.py)
#   WSB_SRC    source directory (tests/python/*.py)
#
# Hygiene: every test works in its own $BATS_TEST_TMPDIR, listens on its own
# port or unix socket, and sends traffic only to 127.0.0.1, ::1 or unix
# sockets. Every process a test starts is recorded and killed by its pid (or
# by the process group it leads) in teardown.

bats_require_minimum_version 1.5.0

: "${WSB_SRC:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
: "${WSB_BUILD:=$WSB_SRC/build}"
export WSB_SRC WSB_BUILD

AGENTD="$WSB_BUILD/agentd/agentd"
WSCTL="$WSB_BUILD/fusefs/wsctl"
# Debian's interpreter: only it sees python3-grpcio (grpc-c-core.md §4).
PY=/usr/bin/python3
PYTESTS="$WSB_SRC/tests/python"
export WSB_PROTO="$WSB_BUILD/proto"
export PYTHONPATH="$WSB_PROTO:$PYTESTS"
export PYTHONDONTWRITEBYTECODE=1
# Keep grpcio's own client-side chatter out of the transcripts.
export GRPC_VERBOSITY=ERROR
# A user's address must never redirect a test.
unset WSBRIDGE_ADDR WSBRIDGE_TOKEN_FILE

# Sanitizer builds (meson -Db_sanitize=address,undefined): every sanitized
# process (agentd, wsctl, also under `run`) writes its reports to files here,
# which teardown turns into a failure.
if [ -n "${BATS_TEST_TMPDIR:-}" ]; then
	SAN_LOG="$BATS_TEST_TMPDIR/sanitizer"
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$SAN_LOG.asan"
	export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:log_path=$SAN_LOG.ubsan"
	# Other projects' leaks at exit, each named with its reason there.
	export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$WSB_SRC/tests/integration/lsan.supp:print_suppressions=0"
fi

# Processes started by this test: "pid" or "-pgid" (a process group).
WSB_PIDS=()
# stderr logs to scan for sanitizer reports in teardown.
WSB_LOGS=()
WSB_NSTARTED=0

# Print a free TCP port on 127.0.0.1: a random one outside the kernel's
# ephemeral range (ip_local_port_range), which it hands to bind(port 0)
# and connect(2) of the tests running beside this one in the time between
# this check and agentd's bind.
free_port() {
	"$PY" -c 'import random, socket
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
span = (10000, lo - 1) if lo > 11000 else (hi + 1, 65535)
for _ in range(100):
    p = random.randint(*span)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
else:
    raise SystemExit("free_port: no free port in %d-%d" % span)'
}

# True while process $1 exists and is not a zombie.
proc_alive() {
	local st t
	[ -r "/proc/$1/stat" ] || return 1
	st=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] || return 1
	[ "$st" != Z ] && [ "$st" != X ] && return 0
	# A killed process's first thread can be a zombie while its other
	# threads still exit, holding its descriptors (a listening socket:
	# a restart on the same address then found it in use).
	for t in /proc/"$1"/task/*; do
		[ "${t##*/}" = "$1" ] && continue
		[ -r "$t/stat" ] && return 0
	done
	return 1
}

# wait_gone PID [SECONDS]: wait until the process is gone (or a zombie).
wait_gone() {
	local i n=$(( ${2:-5} * 20 ))
	for ((i = 0; i < n; i++)); do
		proc_alive "$1" || return 0
		sleep 0.05
	done
	return 1
}

# wait_listen ADDR PID [SECONDS]: wait until ADDR (host:port, [v6]:port or
# unix:/path) accepts a connection; fail at once if PID dies.
wait_listen() {
	"$PY" - "$1" "$2" "${3:-10}" <<-'EOF'
	import os, socket, sys, time
	addr, pid, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
	end = time.monotonic() + secs
	while time.monotonic() < end:
	    try:
	        os.kill(pid, 0)
	        with open("/proc/%d/stat" % pid) as f:
	            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
	                raise ProcessLookupError
	    except ProcessLookupError:
	        sys.exit("process %d exited before listening on %s" % (pid, addr))
	    try:
	        if addr.startswith("unix:"):
	            s = socket.socket(socket.AF_UNIX)
	            s.connect(addr[5:])
	        else:
	            host, port = addr.rsplit(":", 1)
	            host = host.strip("[]")
	            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
	            s.connect((host, int(port)))
	        s.close()
	        sys.exit(0)
	    except OSError:
	        time.sleep(0.02)
	sys.exit("nothing listens on %s after %g s" % (addr, secs))
	EOF
}

# bg NAME CMD...: run CMD in the background in its own process group, stdout
# to $BATS_TEST_TMPDIR/NAME.out and stderr to NAME.err; BG_PID is its pid.
# It is killed (the whole group) in teardown.
bg() {
	local name=$1
	shift
	setsid "$@" >"$BATS_TEST_TMPDIR/$name.out" 2>"$BATS_TEST_TMPDIR/$name.err" </dev/null 3>&- &
	BG_PID=$!
	WSB_PIDS+=("-$BG_PID")
	WSB_LOGS+=("$BATS_TEST_TMPDIR/$name.err")
}

# agentd_start ARGS...: start agentd with ARGS in the background and wait
# until every --listen address accepts connections. Sets AGENTD_PID,
# AGENTD_OUT and AGENTD_ERR (its stdout and stderr files). Fails (printing
# agentd's stderr) if it does not come up.
agentd_start() {
	local a prev='' addrs=()
	if wsb_runsc; then
		agentd_start_runsc "$@"
		return
	fi
	WSB_NSTARTED=$((WSB_NSTARTED + 1))
	AGENTD_OUT="$BATS_TEST_TMPDIR/agentd.$WSB_NSTARTED.out"
	AGENTD_ERR="$BATS_TEST_TMPDIR/agentd.$WSB_NSTARTED.err"
	for a in "$@"; do
		if [ "$prev" = --listen ] || [ "$prev" = -l ]; then
			addrs+=("$a")
		fi
		case $a in --listen=*) addrs+=("${a#--listen=}") ;; esac
		prev=$a
	done
	"$AGENTD" "$@" >"$AGENTD_OUT" 2>"$AGENTD_ERR" </dev/null 3>&- &
	AGENTD_PID=$!
	WSB_PIDS+=("$AGENTD_PID")
	WSB_LOGS+=("$AGENTD_ERR")
	for a in "${addrs[@]}"; do
		if ! wait_listen "$a" "$AGENTD_PID" 10; then
			echo "# agentd $* did not come up; its stderr:" >&3
			sed 's/^/#   /' "$AGENTD_ERR" >&3
			# Who holds a TCP port it could not take (seen once:
			# "address in use" at a restart on the same port).
			case $a in
			unix:*) ;;
			*) command -v ss >/dev/null &&
				ss -tanp | grep -F ":${a##*:} " | sed 's/^/#   ss: /' >&3 ;;
			esac
			return 1
		fi
	done
}

# agentd_tcp [ARGS...]: make $ROOT (BATS_TEST_TMPDIR/root unless ROOT is set),
# pick a free port and start agentd on 127.0.0.1 with ARGS added. Sets PORT
# and ADDR and exports WSBRIDGE_ADDR=$ADDR for wsctl.
agentd_tcp() {
	: "${ROOT:=$BATS_TEST_TMPDIR/root}"
	mkdir -p "$ROOT"
	PORT=$(free_port)
	ADDR="127.0.0.1:$PORT"
	agentd_start --root "$ROOT" --listen "$ADDR" "$@"
	export WSBRIDGE_ADDR=$ADDR
}

# agentd_nobody: start an agentd as user nobody (setpriv) on TCP, serving
# NOBODY_DIR/root (made, owned by nobody) where NOBODY_DIR is a fresh
# /tmp/wsb-nobody.* directory that nobody may enter (the test's own is
# 0700); sets NOBODY_DIR and NOBODY_ADDR; the caller's teardown removes
# NOBODY_DIR. Skips without setpriv or when nobody cannot run $AGENTD.
# (A sanitizer's report goes to stderr, AGENTD_ERR: nobody may not write
# SAN_LOG's directory.)
agentd_nobody() {
	local d
	command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
	d=$(mktemp -d /tmp/wsb-nobody.XXXXXX)
	NOBODY_DIR=$d
	chmod 755 "$d"
	mkdir "$d/root"
	chown nobody: "$d/root"
	printf '#!/bin/sh\nexport ASAN_OPTIONS="${ASAN_OPTIONS:-}:log_path=stderr" UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:log_path=stderr"\nexec setpriv --reuid=nobody --regid=%s --clear-groups %q "$@"\n' \
		"$(id -g nobody)" "$AGENTD" >"$d/agentd"
	chmod 755 "$d/agentd"
	"$d/agentd" --version >/dev/null 2>&1 || skip "user nobody cannot run $AGENTD"
	NOBODY_ADDR="127.0.0.1:$(free_port)"
	AGENTD=$d/agentd agentd_start --root "$d/root" --listen "$NOBODY_ADDR"
}

# agentd_unix [ARGS...]: as agentd_tcp, on the unix socket $BATS_TEST_TMPDIR/s.
agentd_unix() {
	: "${ROOT:=$BATS_TEST_TMPDIR/root}"
	mkdir -p "$ROOT"
	SOCK="$BATS_TEST_TMPDIR/s"
	ADDR="unix:$SOCK"
	agentd_start --root "$ROOT" --listen "$ADDR" "$@"
	export WSBRIDGE_ADDR=$ADDR
}

# agentd_stop [PID]: SIGTERM, then wait up to $WSB_STOP_WAIT seconds (default
# 12: agentd's drain grace is 10 s); sets AGENTD_STATUS to its exit status.
# SIGKILL (status 137) if it does not go.
agentd_stop() {
	local pid=${1:-$AGENTD_PID} i n=$(( ${WSB_STOP_WAIT:-12} * 20 ))
	if wsb_runsc; then
		agentd_stop_runsc "$pid"
		return
	fi
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < n; i++)); do
		proc_alive "$pid" || break
		sleep 0.05
	done
	if proc_alive "$pid"; then
		echo "# agentd $pid still runs $((n / 20)) s after SIGTERM; killing it" >&3
		kill -KILL "$pid" 2>/dev/null || true
	fi
	AGENTD_STATUS=0
	wait "$pid" 2>/dev/null || AGENTD_STATUS=$?
}

# Scan every recorded stderr log, and the sanitizers' own log files, for
# sanitizer reports.
check_sanitizers() {
	local f bad=0
	for f in "${WSB_LOGS[@]}"; do
		[ -f "$f" ] || continue
		if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$f"; then
			echo "# sanitizer report in $f:" >&3
			sed 's/^/#   /' "$f" | head -80 >&3
			bad=1
		fi
	done
	for f in "${SAN_LOG:-/nonexistent}".*; do
		[ -f "$f" ] || continue
		echo "# sanitizer report $f:" >&3
		sed 's/^/#   /' "$f" | head -80 >&3
		bad=1
	done
	return $bad
}

# Call from each file's teardown(): stop everything this test started
# (SIGTERM, then SIGKILL after $WSB_STOP_WAIT seconds, default 5), then fail
# the test if any log holds a sanitizer report. A process killed by SIGKILL
# cannot report leaks: raise WSB_STOP_WAIT to let slow drains finish.
wsb_teardown() {
	local p i
	for p in "${WSB_PIDS[@]}"; do
		kill -TERM -- "$p" 2>/dev/null || true
	done
	for p in "${WSB_PIDS[@]}"; do
		for ((i = 0; i < ${WSB_STOP_WAIT:-5} * 20; i++)); do
			proc_alive "${p#-}" || break
			sleep 0.05
		done
		# A group may keep members after its leader went: kill them too.
		kill -KILL -- "$p" 2>/dev/null || true
		wait "${p#-}" 2>/dev/null || true
	done
	WSB_PIDS=()
	if [ -n "${WSB_RUNSC_TMP:-}" ]; then
		rm -rf "$WSB_RUNSC_TMP"
	fi
	check_sanitizers
}

# assert_eq ACTUAL EXPECTED [WHAT]: exact comparison, showing both on failure.
assert_eq() {
	if [ "$1" != "$2" ]; then
		{
			echo "# ${3:-value} differs"
			echo "# expected: $(printf '%q' "$2")"
			echo "# actual:   $(printf '%q' "$1")"
		} >&3
		return 1
	fi
}

# assert_status N: the last `run` exited with N; show its output otherwise.
assert_status() {
	if [ "$status" -ne "$1" ]; then
		{
			echo "# exit status $status, expected $1"
			echo "# stdout: $(printf '%q' "$output")"
			[ -z "${stderr+x}" ] || echo "# stderr: $(printf '%q' "$stderr")"
		} >&3
		return 1
	fi
}

# pyerr STATEMENT ARGS...: run a Python statement (sys.argv[2:] are ARGS);
# print OK, or the errno name of the OSError it raised.
pyerr() {
	"$PY" -c 'import errno, os, sys
try:
    exec(sys.argv[1])
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))' "$@"
}

# assert_contains HAYSTACK NEEDLE [WHAT]
assert_contains() {
	if [[ "$1" != *"$2"* ]]; then
		{
			echo "# ${3:-text} does not contain $(printf '%q' "$2")"
			echo "# it is: $(printf '%q' "$1")"
		} >&3
		return 1
	fi
}

# assert_not_contains HAYSTACK NEEDLE [WHAT]
assert_not_contains() {
	if [[ "$1" == *"$2"* ]]; then
		{
			echo "# ${3:-text} contains $(printf '%q' "$2")"
			echo "# it is: $(printf '%q' "$1")"
		} >&3
		return 1
	fi
}

# run_py SCRIPT [ARGS...]: run tests/python/SCRIPT with Debian's python3 and
# print its transcript (unittest -v) when it fails.
run_py() {
	local script=$1
	shift
	run "$PY" "$PYTESTS/$script" "$@"
	if [ "$status" -ne 0 ]; then
		printf '%s\n' "$output" | sed 's/^/# /' >&3
		return 1
	fi
}

# Allocated size of a file in KiB, as du(1) reports it (sparseness checks).
alloc_kib() {
	du -k "$1" | cut -f1
}

# ---------------------------------------------------------------------------
# wsfs, the FUSE mount (tests/integration/fs*.bats)
#
# mount_wsfs starts `wsfs [OPTS] -f ADDR MNT` in the background (MNT defaults
# to $BATS_TEST_TMPDIR/mnt) and waits until the kernel lists the mount;
# fs_teardown unmounts every mount the test made (fusermount3 -u, then -uz if
# busy), then stops every process as wsb_teardown does and fails the test if
# a mount is left behind or a log shows a sanitizer report.

WSFS="${WSB_WSFS:-$WSB_BUILD/fusefs/wsfs}"
# The syscall exerciser tests/fsx (tests/meson.build passes its path).
FSX="${WSB_FSX:-$WSB_BUILD/tests/fsx/fsx}"
# Mount points made by this test, for fs_teardown.
WSB_MOUNTS=()

# need_wsfs: skip the test unless wsfs is built and FUSE mounts work here.
need_wsfs() {
	[ -x "$WSFS" ] || skip "wsfs is not built ($WSFS)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	command -v fusermount3 >/dev/null || skip "no fusermount3"
}

# Print PATH the way /proc/self/mountinfo writes it (octal escapes).
mountinfo_escape() {
	local s=${1//\\/\\134}
	s=${s// /\\040}
	s=${s//$'\t'/\\011}
	printf '%s' "${s//$'\n'/\\012}"
}

# is_mounted DIR: DIR is a mount point now (reads mountinfo; never stats
# DIR, so a hung filesystem cannot hang the check).
is_mounted() {
	awk -v m="$(mountinfo_escape "$1")" '$5 == m { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}

# mount_wsfs [WSFS-OPTIONS...]: mount agentd at $ADDR on $MNT. Sets MNT,
# WSFS_PID (pid of wsfs, which leads its own process group) and WSFS_ERR
# (its stderr file). Fails, showing wsfs's stderr, if the mount does not
# appear within 10 s or wsfs exits first.
mount_wsfs() {
	wsfs_start "$@" -f "$ADDR"
}

# mount_wsfs_exec CMD [WSFS-OPTIONS...]: as mount_wsfs, reaching agentd
# through CMD's stdin and stdout (`wsfs --exec CMD MNT`).
mount_wsfs_exec() {
	local cmd=$1
	shift
	wsfs_start "$@" -f --exec "$cmd"
}

# wsfs_start ARGS...: run `wsfs ARGS $MNT` and wait for the mount (the
# body of mount_wsfs and mount_wsfs_exec).
wsfs_start() {
	local i name
	need_wsfs
	: "${MNT:=$BATS_TEST_TMPDIR/mnt}"
	mkdir -p "$MNT"
	WSB_NSTARTED=$((WSB_NSTARTED + 1))
	name="wsfs.$WSB_NSTARTED"
	WSB_MOUNTS+=("$MNT")
	bg "$name" "$WSFS" "$@" "$MNT"
	WSFS_PID=$BG_PID
	WSFS_ERR="$BATS_TEST_TMPDIR/$name.err"
	for ((i = 0; i < 200; i++)); do
		if is_mounted "$MNT"; then
			return 0
		fi
		if ! proc_alive "$WSFS_PID"; then
			echo "# wsfs $* $MNT exited before mounting; its stderr:" >&3
			sed 's/^/#   /' "$WSFS_ERR" >&3
			return 1
		fi
		sleep 0.05
	done
	echo "# wsfs $* $MNT: no mount after 10 s; its stderr:" >&3
	sed 's/^/#   /' "$WSFS_ERR" >&3
	return 1
}

# umount_wsfs [DIR]: unmount DIR (default $MNT): fusermount3 -u, retried for
# 2 s while busy, then a lazy fusermount3 -uz. Returns 0 once DIR is no
# longer a mount point.
# track_mount DIR: have fs_teardown unmount DIR, a mount the test made
# itself (start its wsfs with 3>&-: a daemon left holding bats's fd 3
# hangs the run).
track_mount() {
	WSB_MOUNTS+=("$1")
}

umount_wsfs() {
	local m=${1:-$MNT} i
	is_mounted "$m" || return 0
	for ((i = 0; i < 20; i++)); do
		fusermount3 -u "$m" 2>/dev/null && break
		is_mounted "$m" || break
		sleep 0.1
	done
	if is_mounted "$m"; then
		echo "# $m still busy after 2 s; lazy unmount" >&3
		fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	fi
	! is_mounted "$m"
}

# wsfs_wait_exit [SECONDS]: wait for wsfs (WSFS_PID) to exit, as it must
# once its mount is gone; sets WSFS_STATUS (its exit status). Returns 1 if it
# is still running after SECONDS (default 5).
wsfs_wait_exit() {
	wait_gone "$WSFS_PID" "${1:-5}" || return 1
	WSFS_STATUS=0
	wait "$WSFS_PID" 2>/dev/null || WSFS_STATUS=$?
}

# open_all_then_close DIR N: make N empty files DIR/f0... at once (all
# open together), then close them in a row; fails, showing python's
# output, if that does not succeed.
open_all_then_close() {
	run "$PY" - "$1" "$2" <<-'EOF'
	import os, sys
	fds = [os.open("%s/f%d" % (sys.argv[1], i), os.O_CREAT | os.O_WRONLY, 0o644)
	       for i in range(int(sys.argv[2]))]
	for fd in fds:
	    os.close(fd)
	EOF
	assert_eq "$status" 0 "the exit status of the python that made them: $output"
}

# open_under PID DIR: how many files under DIR the process PID holds open
# (its /proc fd links).
open_under() {
	local pid=$1 dir=$2 fd n=0
	for fd in /proc/"$pid"/fd/*; do
		case "$(readlink "$fd" 2>/dev/null)" in "$dir"/*) n=$((n + 1)) ;; esac
	done
	echo "$n"
}

# none_open_under PID DIR: PID has no descriptor open on a file under DIR
# (a command for poll_until, which runs it again each time).
none_open_under() {
	[ "$(open_under "$1" "$2")" = 0 ]
}

# wsb_sanitized: true when the binaries under test are a sanitizer build
# (meson -Db_sanitize=..., as .ci/run's second run). Read from the build's
# own options: ASAN_OPTIONS cannot tell, as this file sets it for every
# test.
wsb_sanitized() {
	grep -Eq '"name": "b_sanitize", "value": "[a-z,]*(address|undefined)' \
		"$WSB_BUILD/meson-info/intro-buildoptions.json" 2>/dev/null
}

# skip_sanitized REASON: skip a test in a sanitizer build, for one whose
# time goes on waits and loops that the plain run covers; CI must stay
# within its time.
skip_sanitized() {
	if wsb_sanitized; then
		skip "sanitizer run: $1"
	fi
}

# Call from the teardown() of every fs*.bats file.
fs_teardown() {
	local p m rc=0
	# A test may have left its shell inside a mount, or stopped agentd.
	cd "$BATS_TEST_TMPDIR" 2>/dev/null || cd /
	for p in "${WSB_PIDS[@]}"; do
		kill -CONT -- "$p" 2>/dev/null || true
	done
	for m in "${WSB_MOUNTS[@]}"; do
		umount_wsfs "$m" || true
	done
	wsb_teardown || rc=1
	for m in "${WSB_MOUNTS[@]}"; do
		if is_mounted "$m"; then
			echo "# $m is still mounted after teardown" >&3
			fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
			rc=1
		fi
	done
	WSB_MOUNTS=()
	return $rc
}

# Milliseconds since the epoch.
now_ms() {
	date +%s%3N
}

# readdirs: how many READDIR/READDIRPLUS requests for any
# directory reached wsfs so far (its -d log).
readdirs() {
	grep -c 'opcode: READDIR' "$WSFS_ERR" || true
}

# cached DIR N: wait until DIR lists N names from the kernel's cache alone
# (no READDIR reaches wsfs: mount_wsfs -d, whose log must show the ones
# that filled it).
cached() {
	local i n0
	for ((i = 0; i < 100; i++)); do
		n0=$(readdirs)
		[ "$(find "$1" -mindepth 1 -maxdepth 1 -printf . | wc -c)" = "$2" ] &&
			[ "$n0" -gt 0 ] && [ "$(readdirs)" = "$n0" ] && return 0
		sleep 0.05
	done
	echo "# $1: never listed $2 names from the kernel's cache" >&3
	return 1
}

# poll_until SECONDS CMD...: run CMD (a command or a shell function) every
# 20 ms until it succeeds; sets POLL_MS to the milliseconds it took. Returns
# 1 if it never succeeded within SECONDS.
poll_until() {
	local secs=$1 t0 end
	shift
	t0=$(now_ms)
	end=$((t0 + $(awk -v s="$secs" 'BEGIN { printf "%d", s * 1000 }')))
	while :; do
		if "$@" >/dev/null 2>&1; then
			POLL_MS=$(($(now_ms) - t0))
			return 0
		fi
		if (($(now_ms) >= end)); then
			POLL_MS=$(($(now_ms) - t0))
			return 1
		fi
		sleep 0.02
	done
}

# content_is FILE BYTES: FILE holds exactly BYTES (printf %s semantics).
content_is() {
	[ -f "$1" ] && printf '%s' "$2" | cmp -s - "$1"
}

# assert_content FILE BYTES [WHAT]: as content_is, showing both on failure.
assert_content() {
	if ! content_is "$1" "$2"; then
		{
			echo "# ${3:-$1}: content differs"
			echo "# expected: $(printf '%q' "$2")"
			if [ -e "$1" ]; then
				echo "# actual:   $(head -c 2000 "$1" | od -An -c | tr -s ' ' | head -20)"
			else
				echo "# actual:   (no such file)"
			fi
		} >&3
		return 1
	fi
}

# Whole-tree signature for round-trip comparisons, one line per entry:
# path|type|mode|nlink|size|mtime(ns)|symlink target. Directory sizes and
# link counts are left out (they are the filesystem's business).
tree_sig() {
	(cd "$1" && find . -printf '%p|%y|%m|%n|%s|%T@|%l\n' | LC_ALL=C sort |
		awk -F'|' -v OFS='|' '$2 == "d" { $4 = "-"; $5 = "-" } { print }')
}

# git_env: a git that reads no user or system configuration and commits as
# a fixed test identity, with branch "main" for new repositories.
git_env() {
	export HOME="$BATS_TEST_TMPDIR/home"
	mkdir -p "$HOME"
	export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
	export GIT_AUTHOR_NAME=wsb GIT_AUTHOR_EMAIL=wsb@example.invalid
	export GIT_COMMITTER_NAME=wsb GIT_COMMITTER_EMAIL=wsb@example.invalid
	export GIT_CONFIG_COUNT=2
	export GIT_CONFIG_KEY_0=init.defaultBranch GIT_CONFIG_VALUE_0=main
	export GIT_CONFIG_KEY_1=safe.directory GIT_CONFIG_VALUE_1='*'
}

# ---------------------------------------------------------------------------
# gVisor (docs/gvisor.md). WSB_RUNSC=1 runs every agentd these helpers start
# inside `runsc do` (tests/integration/gvisor-agentd: --network=none, ptrace
# platform, the host's root writable and shared, host unix sockets allowed),
# reached, by WSB_RUNSC_VIA:
#   uds (default)  agentd listens on a unix socket on the host
#                  (--host-uds=all). A TCP --listen address (agentd_tcp)
#                  becomes a host-side socat relay from that loopback
#                  address to agentd's socket $BATS_TEST_TMPDIR/gv-PORT.sock:
#                  under --network=none nothing in the sandbox has an
#                  address the host can reach.
#   stdio          as through `kubectl exec -i POD -- agentd --stdio`: a
#                  sandbox (the pod, runsc_pod) and, for each --listen
#                  address, a host-side socat tunnel that starts one
#                  `agentd --stdio` in it (`runsc exec`) per connection.
# AGENTD is then the gvisor-agentd wrapper, so a test that runs "$AGENTD"
# itself (a socat EXEC, --stdio) runs it in gVisor as well.
#
# Under uds, AGENTD_PID is the sandbox process (runsc-sandbox, the gVisor
# kernel: it forwards SIGTERM and SIGINT to agentd, SIGSTOP freezes the
# whole sandbox, SIGKILL ends it) and agentd_stop reaps the runsc CLI,
# whose exit status is agentd's. Under stdio, AGENTD_PID is the socat
# tunnel, which leads a process group with every agentd's runsc exec CLI
# behind it, and agentd_stop ends that group and then the pod.
#
# Processes of the pod side (pids written by commands agentd ran) live in
# the sandbox's own pid namespace: check them with pod_proc_alive and
# pod_wait_gone, and run pod-side commands with pod_run.
#
# Tests that cannot apply under gVisor are skipped by name, with a reason,
# from WSB_RUNSC_EXCLUDE below (their setup never runs).
#
# Traffic stays on loopback and unix sockets: the relays and tunnels listen
# on 127.0.0.1 / [::1] only and connect to unix sockets only.

RUNSC="${WSB_RUNSC_BIN:-runsc}"
GVISOR_AGENTD="$WSB_SRC/tests/integration/gvisor-agentd"
# Under WSB_RUNSC: TCP address -> pid of its host-side relay; sandbox pid ->
# runsc CLI pid; tunnel pid -> its pod's runsc CLI pid (stdio).
declare -gA WSB_RUNSC_RELAY=() WSB_RUNSC_CLI=() WSB_RUNSC_TUNNEL=()

# wsb_runsc: true when agentd runs under gVisor (WSB_RUNSC=1).
wsb_runsc() {
	[ "${WSB_RUNSC:-0}" = 1 ]
}

# need_runsc: skip the test unless runsc is installed.
need_runsc() {
	command -v "$RUNSC" >/dev/null || skip "runsc is not installed (apt-get install runsc)"
}

if wsb_runsc; then
	export WSB_AGENTD="$AGENTD"
	AGENTD=$GVISOR_AGENTD
	# runsc keeps its state (a runsc-do* directory, and the sandbox's
	# chroot) in $TMPDIR: a directory of this test's own, where
	# runsc_sandboxes finds them; wsb_teardown removes it. Not in
	# $BATS_TEST_TMPDIR: the sandbox process must be able to enter it, and
	# bats makes its run directory 0700. (runsc do passes its environment
	# on: agentd and the commands it runs see this TMPDIR too.)
	if [ -n "${BATS_TEST_TMPDIR:-}" ]; then
		WSB_RUNSC_TMP=$(mktemp -d /tmp/wsb-runsc.XXXXXX)
		chmod 0755 "$WSB_RUNSC_TMP"
		export TMPDIR="$WSB_RUNSC_TMP"
	fi
fi

# runsc_safe_stdio CMD...: run CMD (a runsc command that hands its stdio to
# the sandbox, which chowns it to nobody) with a pipe on fd 0, 1 and 2, so
# no device (/dev/null, a terminal) and no file of the caller is touched.
# Returns CMD's status.
runsc_safe_stdio() {
	local st
	"$@" < <(:) 2> >(cat >&2) | cat
	st=${PIPESTATUS[0]}
	return "$st"
}

# agentd_start_runsc ARGS...: agentd_start under WSB_RUNSC (see above).
agentd_start_runsc() {
	local a i spec script cli addrs=() args=() listen=() waits=()
	WSB_NSTARTED=$((WSB_NSTARTED + 1))
	AGENTD_OUT="$BATS_TEST_TMPDIR/agentd.$WSB_NSTARTED.out"
	AGENTD_ERR="$BATS_TEST_TMPDIR/agentd.$WSB_NSTARTED.err"
	for ((i = 1; i <= $#; i++)); do
		a=${!i}
		case $a in
		--listen | -l)
			i=$((i + 1))
			addrs+=("${!i}")
			;;
		--listen=*) addrs+=("${a#--listen=}") ;;
		*) args+=("$a") ;;
		esac
	done

	if [ "${WSB_RUNSC_VIA:-uds}" = stdio ]; then
		[ ${#addrs[@]} -gt 0 ] || addrs=(127.0.0.1:9000)
		runsc_pod || return 1
		# One script per agentd: socat's EXEC splits on spaces. Each
		# connection is one `agentd --stdio` started in the pod by
		# `runsc exec`, as `kubectl exec -i POD -- agentd --stdio` starts
		# one in the pod's running sandbox.
		script="$BATS_TEST_TMPDIR/agentd-stdio.$WSB_NSTARTED"
		{
			echo '#!/bin/bash'
			printf 'exec'
			printf ' %q' "$RUNSC" --root "$POD_STATE" exec -cwd "$PWD" "$POD_ID" \
				"$WSB_AGENTD" "${args[@]}" --stdio
			echo
		} >"$script"
		chmod +x "$script"
		AGENTD_PID=
		for a in "${addrs[@]}"; do
			case $a in
			unix:*) spec="UNIX-LISTEN:${a#unix:},fork,unlink-early" ;;
			127.*:*) spec="TCP4-LISTEN:${a##*:},bind=${a%:*},reuseaddr,fork" ;;
			\[::1\]:*) spec="TCP6-LISTEN:${a##*:},bind=[::1],reuseaddr,fork" ;;
			*)
				echo "# WSB_RUNSC_VIA=stdio: no tunnel for non-loopback address $a" >&3
				return 1
				;;
			esac
			bg "agentd.$WSB_NSTARTED" socat "$spec" "EXEC:$script"
			WSB_RUNSC_TUNNEL[$BG_PID]=$POD_PID
			: "${AGENTD_PID:=$BG_PID}"
			if ! wait_listen "$a" "$BG_PID" 10; then
				sed 's/^/#   /' "$AGENTD_ERR" >&3
				return 1
			fi
		done
		return 0
	fi

	for a in "${addrs[@]}"; do
		case $a in
		unix:*)
			listen+=(--listen "$a")
			waits+=("$a")
			;;
		127.*:* | \[::1\]:*)
			runsc_relay "$a"
			listen+=(--listen "unix:$RELAY_SOCK")
			waits+=("unix:$RELAY_SOCK")
			;;
		*)
			# Not reachable from here under --network=none; agentd
			# may refuse it (no token), which is what tests check.
			listen+=(--listen "$a")
			waits+=("$a")
			;;
		esac
	done
	"$AGENTD" "${args[@]}" "${listen[@]}" >"$AGENTD_OUT" 2>"$AGENTD_ERR" </dev/null 3>&- &
	cli=$!
	AGENTD_PID=$cli
	WSB_PIDS+=("$cli")
	WSB_LOGS+=("$AGENTD_ERR")
	for a in "${waits[@]}"; do
		if ! wait_listen "$a" "$cli" 20; then
			echo "# agentd $* (in runsc) did not come up; its stderr:" >&3
			sed 's/^/#   /' "$AGENTD_ERR" >&3
			return 1
		fi
	done
	for ((i = 0; i < 100; i++)); do
		a=$(pgrep -P "$cli" -f '^runsc-sandbox ' | head -n 1) || true
		[ -z "$a" ] || break
		proc_alive "$cli" || break
		sleep 0.05
	done
	if [ -n "$a" ]; then
		AGENTD_PID=$a
		WSB_RUNSC_CLI[$a]=$cli
	fi
}

# runsc_pod: the pod for WSB_RUNSC_VIA=stdio: a sandbox started as
# gvisor-agentd starts agentd's (the same runsc flags), whose first process
# is `sleep infinity` where a pod's would be its container's command. Sets
# POD_PID (the runsc CLI, leader of a process group of its own; SIGTERM ends
# the sandbox), POD_STATE (the runsc state directory to pass as --root) and
# POD_ID (the container id) for `runsc exec`. Returns 1, with runsc's
# stderr on fd 3, if the sandbox does not run within 10 s.
runsc_pod() {
	local tmp d i
	tmp="$WSB_RUNSC_TMP/pod.$WSB_NSTARTED"
	mkdir -m 0755 "$tmp"
	bg "pod.$WSB_NSTARTED" env TMPDIR="$tmp" WSB_AGENTD="$(command -v sleep)" \
		"$GVISOR_AGENTD" infinity
	for ((i = 0; i < 200; i++)); do
		for d in "$tmp"/runsc-do*; do
			[ -d "$d" ] || continue
			POD_ID=$("$RUNSC" --root "$d" list 2>/dev/null |
				awk 'NR > 1 && $3 == "running" { print $1; exit }')
			if [ -n "$POD_ID" ]; then
				POD_STATE=$d
				POD_PID=$BG_PID
				return 0
			fi
		done
		proc_alive "$BG_PID" || break
		sleep 0.05
	done
	echo "# the pod's sandbox did not come up; runsc's stderr:" >&3
	sed 's/^/#   /' "$BATS_TEST_TMPDIR/pod.$WSB_NSTARTED.err" >&3
	return 1
}

# runsc_relay ADDR: make sure a host-side socat relays loopback ADDR
# (127.x.y.z:PORT or [::1]:PORT) to the unix socket agentd will listen on
# for it; sets RELAY_SOCK to that socket's path. One relay per address per
# test: an agentd restarted on ADDR is reached through the same relay.
runsc_relay() {
	local a=$1 port=${1##*:} spec
	RELAY_SOCK="$BATS_TEST_TMPDIR/gv-$port.sock"
	if [ -n "${WSB_RUNSC_RELAY[$a]:-}" ] && proc_alive "${WSB_RUNSC_RELAY[$a]}"; then
		return 0
	fi
	case $a in
	\[::1\]:*) spec="TCP6-LISTEN:$port,bind=[::1],reuseaddr,fork" ;;
	*) spec="TCP4-LISTEN:$port,bind=${a%:*},reuseaddr,fork" ;;
	esac
	bg "relay.$port" socat "$spec" "UNIX-CONNECT:$RELAY_SOCK"
	WSB_RUNSC_RELAY[$a]=$BG_PID
	wait_listen "$a" "$BG_PID" 10
}

# agentd_stop_runsc PID: agentd_stop under WSB_RUNSC.
agentd_stop_runsc() {
	local pid=$1 wpid i n=$(( ${WSB_STOP_WAIT:-12} * 20 ))
	if [ -n "${WSB_RUNSC_TUNNEL[$pid]:-}" ]; then
		# stdio: the tunnel and every agentd behind it (each runsc exec
		# CLI passes the SIGTERM on to its agentd), then the pod.
		kill -TERM -- "-$pid" 2>/dev/null || true
		wpid=$pid
	else
		kill -TERM "$pid" 2>/dev/null || true
		wpid=${WSB_RUNSC_CLI[$pid]:-$pid}
	fi
	for ((i = 0; i < n; i++)); do
		proc_alive "$wpid" || break
		sleep 0.05
	done
	if proc_alive "$wpid"; then
		echo "# agentd (runsc $wpid) still runs $((n / 20)) s after SIGTERM; killing it" >&3
		kill -KILL "$wpid" 2>/dev/null || true
	fi
	[ -z "${WSB_RUNSC_TUNNEL[$pid]:-}" ] || kill -KILL -- "-$pid" 2>/dev/null || true
	AGENTD_STATUS=0
	wait "$wpid" 2>/dev/null || AGENTD_STATUS=$?
	if [ -n "${WSB_RUNSC_TUNNEL[$pid]:-}" ]; then
		wpid=${WSB_RUNSC_TUNNEL[$pid]}
		kill -TERM -- "-$wpid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			proc_alive "$wpid" || break
			sleep 0.05
		done
		kill -KILL -- "-$wpid" 2>/dev/null || true
		wait "$wpid" 2>/dev/null || true
	fi
}

# runsc_sandboxes: print "STATEDIR CONTAINER-ID" for every sandbox this test
# started that runsc still lists as running.
runsc_sandboxes() {
	local d c
	for d in "${WSB_RUNSC_TMP:-/nonexistent}"/runsc-do* "${WSB_RUNSC_TMP:-/nonexistent}"/pod.*/runsc-do*; do
		[ -d "$d" ] || continue
		"$RUNSC" --root "$d" list 2>/dev/null | awk 'NR > 1 && $3 == "running" { print $1 }' |
			while read -r c; do
				printf '%s %s\n' "$d" "$c"
			done
	done
}

# pod_run CMD...: run CMD on the pod side: in agentd's sandbox under
# WSB_RUNSC=1 with WSB_RUNSC_VIA=uds (runsc exec; there must be exactly
# one), else here. Returns CMD's status.
pod_run() {
	local sb
	if ! wsb_runsc; then
		"$@"
		return
	fi
	mapfile -t sb < <(runsc_sandboxes)
	if [ ${#sb[@]} -ne 1 ]; then
		echo "# pod_run $*: ${#sb[@]} running sandboxes, want 1" >&3
		return 125
	fi
	runsc_safe_stdio "$RUNSC" --root "${sb[0]% *}" exec "${sb[0]#* }" "$@"
}

# pod_proc_alive PID: true while process PID of the pod side exists and is
# not a zombie (as proc_alive), in any running sandbox of this test under
# WSB_RUNSC=1, else here.
pod_proc_alive() {
	local s st
	if ! wsb_runsc; then
		proc_alive "$1"
		return
	fi
	[[ $1 =~ ^[0-9]+$ ]] || return 1
	while read -r s; do
		st=$(runsc_safe_stdio "$RUNSC" --root "${s% *}" exec "${s#* }" \
			cat "/proc/$1/stat" 2>/dev/null) || continue
		st=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' <<<"$st")
		[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] && return 0
	done < <(runsc_sandboxes)
	return 1
}

# pod_wait_gone PID [SECONDS]: wait_gone for a process of the pod side.
pod_wait_gone() {
	local i n=$(( ${2:-5} * 10 ))
	if ! wsb_runsc; then
		wait_gone "$@"
		return
	fi
	for ((i = 0; i < n; i++)); do
		pod_proc_alive "$1" || return 0
		sleep 0.1
	done
	echo "# pod process $1 still runs after ${2:-5} s" >&3
	return 1
}

# Tests skipped under gVisor: "FILE: DESCRIPTION" -> reason. A key ending
# in "@stdio" applies only under WSB_RUNSC_VIA=stdio, "@uds" only under uds.
# docs/gvisor.md explains each difference.
declare -gA WSB_RUNSC_EXCLUDE=(
	# Pending agentd changes (files other people are editing); drop the
	# entry when the change is in.
	# What the pod's file system (gVisor's gofer) does differently.
	["fs-cases.bats: S2: cc builds a program on MNT (the linker seeks and rewrites) and it runs"]="runs the program on the host, where gVisor's gofer still holds it open for writing (ETXTBSY); gvisor.bats runs it in the pod"
	["fs-cases.bats: M1: times past 2262 and before 1970 (beyond int64 nanoseconds) are set and shown as on a local directory"]="gVisor keeps a file's times as int64 nanoseconds: in the pod itself a time past 2262 wraps to 1677 (the mount shows what the pod keeps)"
	["fs-cases.bats: M2: tar -xpf into MNT reproduces modes and mtimes; tar -c from MNT round-trips"]="gVisor's gofer shows FIFOs with nlink 2"
	["fs-cases.bats: M2: cp -a DIR MNT/ and back reproduces modes, mtimes, links and xattrs"]="gVisor's gofer shows FIFOs with nlink 2 and has no user.* xattrs (EOPNOTSUPP)"
	["fs-fsx.bats: fsx: each syscall on the mount matches a local directory (result and errno)"]="gVisor's gofer differs in SEEK_HOLE, nlink of unlinked files, FIFOs and sockets, renameat2 flags, xattrs, fallocate modes; gvisor.bats runs the other fsx cases"
	# The pod side written from the host, outside the sandbox: gVisor's
	# inotify sees only what the sandbox does. gvisor.bats makes the same
	# changes in the sandbox.
	["fs-remote.bats: R1: a file the POD creates shows on MNT at once, even after MNT looked for it"]="writes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: POD deletes, renames, mkdir/rmdir, chmod and touch show at once"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: rm -rf on MNT of a tree the POD removes at the same moment succeeds, as two rm -rf of one local tree do"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: an unchanged directory is listed from the kernel's cache; a change in the POD drops it"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: names the POD creates or removes in directories the mount just made show at once"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: find on a fresh mount lists a whole tree in one ReadDir; a change in the POD still shows"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: Open brings a file's first bytes along; a write in between, here or in the POD, is never missed"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: hard links share st_ino and nlink 2; symlinks keep their target"]="makes a hard link on the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: wsfs --exec: a mount over agentd --stdio works, sees pod changes, and survives the command dying"]="creates files on the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: wsfs --exec: a transport that hangs (its agentd --stdio stopped) is run again once nothing has answered for twice rpc_timeout"]="stops the command's agentd with SIGSTOP; under gVisor the process found is the sandbox's wrapper, and the sandbox serves on (wsfs's side, tested without gVisor)"
	["fs-tools.bats: a directory of 20,000 entries is listed exactly once each"]="removes entries on the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: a reader part-way through a cached listing while the POD removes and adds names gets every other name once"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox (gvisor.bats makes them there)"
	["fs-remote.bats: R1: after a rewinddir served from the kernel's cache, a handle that had listed before neither misses nor revives names"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: a handle that read to the end, rewound into a newer cached listing, still gets the name the POD added past its old end"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: a directory removed in the POD while a reader on MNT is part-way through it: getdents64 fails ENOENT, as on ext4"]="removes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: listings prefetched with a parent's never hide the mount's own or the pod's later changes"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: a directory removed through the mount while it is a process's cwd and open: ls, stat and fstat of it work, as on a local disk"]="gVisor's gofer gives a removed directory nlink 1 (the mount shows what agentd gets); the rest runs here"
	["fs-remote.bats: the POD removes, renames or replaces a host process's cwd or open file: the process stays with its own directory or file, as on a local disk"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: a file the POD replaces by rename in a tight loop opens whole on MNT: fstat's size is the bytes read, and a mmap(2) of it reads them"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox (and gVisor never reuses an inode number)"
	["fs-remote.bats: R2: a file the POD replaces by rename in a tight loop while other processes open it: a reader's bytes are its file's, never padded to another's size, and the name is found (one miss let pass)"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: a file the POD removes and writes anew in a tight loop: opens on MNT never fail ESTALE, read(2) gives at least fstat(2)'s size, and a mmap(2) of it reads those bytes"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: a directory replaced by rename(2) through the mount while it is a process's cwd and open: ls, stat and fstat of it work, as on a local disk"]="gVisor's gofer gives a replaced directory nlink 1 (the mount shows what agentd gets); the rest runs here"
	["fs-remote.bats: R2: a file the POD rewrites in place just before the mount opens it reads whole: not cut to, nor padded to, the size the mount knew"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: the echo of the mount's own change costs no call (the event brings the attributes); the pod's change still shows"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: stat after the mount's own write or chmod matches the pod: after a read (atime), on a directory listed, on a file linked outside"]="links and appends on the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: a call stuck in the kernel (a hung mount inside the workspace) does not hold up agentd's other calls, exec or health"]="mounts a host FUSE file system inside the workspace; the sandbox does not see host mounts"
	["fs-remote.bats: R2: an open file the POD renamed (over a known name, or a directory above it) still shows the pod's changes"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: C1: a name the mount was told is missing, made in the POD while the watch was down, shows once it is back"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: a stat after a read costs no call (the read brings the attributes, atime too); the pod's change still shows"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: with directories past agentd's watch limit, the pod's changes in any of them show within entry_timeout, not watch_timeout"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: hard links the POD makes in a burst (past a batch's attributes) show nlink 2 on every linked file at once"]="links on the pod side from the host while agentd is stopped (SIGSTOP of runsc is not of agentd)"
	["fs-remote.bats: R2: after echo x >> MNT/f, MNT and POD both show the new size and mtime at once"]="edits the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: temporary names made, linked and unlinked (git's objects) keep a directory's names known; the pod's changes there still show"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: with whole-second timestamps, the POD's file at a name the mount just removed, and the POD's chmod back to an earlier mode, show"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: the POD's append right after the mount's own rename shows (agentd folds it into the MOVED)"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R2: the POD's write right after the mount's own create shows (agentd folds it into the CREATED and says so)"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: with another gRPC poll engine in the environment, an idle mount still takes in the POD's changes"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: R1: an idle mount takes in the POD's changes while no request of its own runs"]="changes the pod side from the host; gVisor's inotify sees only changes made in the sandbox"
	["fs-remote.bats: write-behind: when agentd fails some writes of a 16 MiB write(2) (EIO injected), a writer that retries short counts gets the error or the pod has every byte"]="injects EIO into agentd's pwrite64 with strace; under gVisor the writes are the sandbox kernel's"
	["fs-remote.bats: write-behind: a write agentd fails (EIO injected) fails fsync of every descriptor open on the file"]="injects EIO into agentd's pwrite64 with strace; under gVisor the writes are the sandbox kernel's"
	["fs-remote.bats: write-behind: a write agentd fails (EIO injected) still fails the writer's fsync after a child it ran closed the descriptor"]="injects EIO into agentd's pwrite64 with strace; under gVisor the writes are the sandbox kernel's"
	["fs-remote.bats: write gathering: gathered writes agentd fails (EIO injected) fail close or fsync with EIO, never succeed; the mount then reads what the pod has"]="injects EIO into agentd's pwrite64 with strace; under gVisor the writes are the sandbox kernel's"
	["fs-remote.bats: write-behind: a failed write over cached pages: a descriptor open all along reads what the pod has"]="injects EIO into agentd's pwrite64 with strace; under gVisor the writes are the sandbox kernel's"
	["fs-remote.bats: setattr-behind: a chmod agentd fails (EIO injected) after it returned fails close with EIO; the mount then shows the pod's mode"]="injects EIO into agentd's fchmod with strace; under gVisor the calls are the sandbox kernel's"
	["fs-remote.bats: A1/R1: appends from the mount and from the pod interleave whole"]="appends from the host race the sandbox's O_APPEND (gVisor computes the append offset itself)"
	["wsctl.bats: a time past 2262 (ext4 keeps them) is reported as the latest the wire holds, 2262-04-11"]="gVisor keeps times as int64 nanoseconds itself: its stat(2) already shows a 2300 date as 1715"
	# Runtime.
	["fs-tools.bats: git: init, add 2000 files, commit, status, checkout, gc, fsck, three rounds"]="170 s on the ptrace platform; G4 and A2 run git on the mount too"
	# wsfs's own races and sessions, 10-60 s each on the ptrace platform:
	# the plain and sanitizer runs cover them; the SIGKILL session test
	# and G2's O_PATH reopen run here.
	["fs-cases.bats: G2: readers that hold x by O_PATH and open it by /proc/self/fd while mv x.new x runs 1,000 times: ESTALE at most a few times"]="wsfs's lookup race, 50 s on the ptrace platform; the plain runs cover it"
	["fs-remote.bats: a directory renamed around (mv A T; mv B A; mv T B) while readers open x in it through a directory fd: never ENOENT"]="wsfs's lookup race, tens of seconds on the ptrace platform; the plain runs cover it"
	["fs-remote.bats: a listing read part-way across mv x_k.new x_k in its directory: the rest of it does not bind x_k to the replaced file"]="wsfs's READDIRPLUS check; the plain runs cover it"
	["fs-remote.bats: sessions: a connection lost for less than --session-grace keeps every open file, an unlinked one too; past it, files open by name carry on and an unlinked one fails with EIO"]="waits out a session grace (15 s); the SIGKILL session test runs here"
	["fs-remote.bats: sessions: a wsfs killed behind a link that went silent (no close reaches agentd) loses its files within keepalive + grace"]="waits out keepalive and a session grace; the SIGKILL session test runs here"
	["fs-remote.bats: sessions: with -o no_watch the mount still holds its session (an unlinked open file reads past the grace); agentd stops at once on SIGTERM"]="waits out a session grace; the SIGKILL session test runs here"
	# wsfs's own logic (interrupts, reconnects, write-behind, its options):
	# what agentd does in them is what the tests kept here do, at 10-60 s
	# each on the ptrace platform; the plain and sanitizer runs cover them.
	["fs-cases.bats: G4: git init, add, commit, status, gc, many times in a row, no EINTR"]="wsfs's interrupt handling, 56 s on the ptrace platform; A2 runs git on the mount here"
	["fs-tools.bats: 8 concurrent writers: own files and one shared O_APPEND log, every line whole"]="40 s on the ptrace platform; A1 and A3 append through the mount here"
	["fs-remote.bats: C1: agentd stopped during a stream of 1 MiB writes: a write or the close fails with EIO/ENOTCONN within the bound; after SIGCONT the mount works"]="wsfs's deadlines; C1 with agentd killed and restarted runs here"
	["fs-remote.bats: C1: agentd stopped (SIGSTOP): calls fail within the bound, never hang; after SIGCONT the mount works"]="wsfs's deadlines; C1 with agentd killed and restarted runs here"
	["fs-remote.bats: C1: a directory that is a process's cwd stays its cwd through an agentd restart, also when looked up while agentd was away"]="a restarted sandbox numbers every file anew (gVisor's gofer), so the cwd is another directory to the mount after it; the outage half passes here"
	["fs-remote.bats: wsfs --exec: when a command lingers after its agentd died, the mount works again at once, not after wsfs has waited for the old one, which is then reaped"]="wsfs's reaping of its transport command; a new sandbox can take longer to start than the old command's 2 s grace, which the test measures against"
	["fs-remote.bats: C1: agentd restarted twice on a unix socket; wsfs exits 0 on unmount"]="wsfs's reconnects; C1 with agentd killed and restarted runs here"
	["fs-remote.bats: write-behind: two handles writing over each other's bytes land in the pod in the order they were made"]="wsfs's write-behind ordering; the other write-behind tests run here"
	["fs-remote.bats: write gathering: two handles writing over each other's bytes in 4 KiB writes land in the pod in the order they were made"]="wsfs's ordering of gathered runs (19 s here); the other gathering tests run here"
	["fs-remote.bats: write gathering: with -o gather_ms long, writes to 400 open files hold at most 64 MiB gathered; the rest reach the pod while open"]="wsfs's memory cap (8 s here); the other gathering tests run here"
	["fs-remote.bats: write-behind: on a link that carries 1 MiB well within rpc_timeout, 16 MiB written behind do not time out"]="wsfs's write-behind deadlines over a slowed link; the other write-behind tests run here"
	["fs-remote.bats: a directory past -o max_dir_entries fails to list with EFBIG and a message; one at the limit lists"]="wsfs's option; listings run here in every fs suite"
	["transfer.bats: round trip over TCP: 1 GiB sparse stays sparse"]="the same file over a unix socket runs here (the transport is the host relay's)"
)

# Under WSB_RUNSC, skip an excluded test before its setup runs. bats 1.8
# calls bats_test_begin DESCRIPTION (which calls setup) first thing in every
# test; it is wrapped here to look the test up in WSB_RUNSC_EXCLUDE.
if wsb_runsc && declare -F bats_test_begin >/dev/null && ! declare -F wsb_bats_test_begin >/dev/null; then
	eval "wsb_bats_test_begin() $(declare -f bats_test_begin | tail -n +2)"
	bats_test_begin() {
		local key reason
		key="$(basename "$BATS_TEST_FILENAME"): $1"
		reason=${WSB_RUNSC_EXCLUDE[$key]:-${WSB_RUNSC_EXCLUDE[$key@${WSB_RUNSC_VIA:-uds}]:-}}
		if [ -n "$reason" ]; then
			BATS_TEST_DESCRIPTION="$1"
			skip "gVisor: $reason"
		fi
		wsb_bats_test_begin "$@"
	}
fi
