#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# wsfs against an agentd that lies: no input from the network may crash wsfs
# or hang the mount. tests/python/hostile_agentd.py stands between wsfs and a
# real agentd and corrupts replies and Watch batches at random (fields set to
# edge values, names such as "..", "/" and "a\0b", lists emptied or grown to
# thousands, made-up failures and events, the stream ended early); ordinary
# tools then work on the mount. Under the ASan + UBSan build (CI runs the
# suite again there) any memory error or undefined behaviour aborts wsfs and
# fails the test.

load test_helper

BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-600}

# The liar's seeds (about 15-25 s each): by default one per test in a plain
# build and another in a sanitizer build, so that CI's two runs try two
# each; give more for a longer hunt, e.g. WSB_HOSTILE_SEEDS="$(seq 100 140)".
SEEDS=${WSB_HOSTILE_SEEDS:-}

# seeds PLAIN SANITIZED: $SEEDS if given, else PLAIN or, in a sanitizer
# build, SANITIZED.
seeds() {
	if [ -n "$SEEDS" ]; then
		echo "$SEEDS"
	elif wsb_sanitized; then
		echo "$2"
	else
		echo "$1"
	fi
}

setup() {
	need_wsfs
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT/d/e"
	for i in $(seq 12); do
		printf 'file %s\n' "$i" >"$ROOT/f$i"
		printf 'x\n' >"$ROOT/d/g$i"
	done
	ln -s f1 "$ROOT/sl"
	ln "$ROOT/f2" "$ROOT/hl"
	mkfifo "$ROOT/fifo"
	dd if=/dev/urandom of="$ROOT/big" bs=64K count=40 2>/dev/null
}

teardown() {
	fs_teardown
}

# liar_start SEED HOSTILE-ARGS...: start agentd on a unix socket and
# hostile_agentd.py with HOSTILE-ARGS in front of it, on LIAR_SOCK (its pid:
# LIAR_PID).
liar_start() {
	agentd_unix
	LIAR_SOCK="$BATS_TEST_TMPDIR/liar.$1.sock"
	bg "liar.$1" "$PY" "$PYTESTS/hostile_agentd.py" --listen "unix:$LIAR_SOCK" \
		--upstream "$ADDR" --seed "$@"
	LIAR_PID=$BG_PID
	wait_listen "unix:$LIAR_SOCK" "$LIAR_PID" 10
}

# liar_mount: mount wsfs on the liar (ADDR stays agentd's).
liar_mount() {
	local a=$ADDR
	ADDR="unix:$LIAR_SOCK"
	mount_wsfs -o rpc_timeout=2
	ADDR=$a
}

# liar SEED RATE: liar_start, honest until the mount is up (wsfs checks the
# root at mount time and refuses a lie there, which is right but not what is
# tested), then liar_mount and let it lie. CALM is the file that makes it
# honest again.
liar() {
	CALM="$BATS_TEST_TMPDIR/calm.$1"
	: >"$CALM"
	liar_start "$1" --rate "$2" --calm "$CALM"
	liar_mount
	rm -f "$CALM"
}

# try CMD...: run CMD on the mount; it may fail (the liar says so), but no
# process of it may wait on the mount for good (rpc_timeout is 2 s, so each
# request ends within seconds). Lies can block a tool elsewhere, as on any
# file system that said the same: open(2) of what the kernel was told is a
# FIFO waits for a writer, and tar pads a file it was told is 2^63 bytes
# long with zeros for ever. A CMD still running after 10 s is looked at
# every 3 s: blocked outside FUSE (its processes' kernel stacks), it is
# killed and passes; in FUSE without a context switch since the last look
# (one request for 3 s), or still running after 120 s, it is a hang: reported, and
# the connection is aborted (a process whose request wsfs has read cannot
# be killed: fs/fuse/dev.c request_wait_answer).
try() {
	local p i stacks io last='' conn hung=0
	"$@" >/dev/null 2>&1 3>&- &
	p=$!
	for ((i = 0; i < 100; i++)); do
		proc_alive "$p" || break
		sleep 0.1
	done
	for ((i = 0; i < 37; i++)); do
		proc_alive "$p" || break
		stacks=$(proc_stacks "$p")
		if ! grep -q fuse <<<"$stacks"; then
			kill -KILL "$p" $(pgrep -P "$p") 2>/dev/null || true
			echo "# blocked outside wsfs, killed: $* ($(head -n 1 <<<"$stacks"))" >&3
			break
		fi
		io=$(proc_switches "$p")
		if [ "$io" = "$last" ]; then
			hung=1
			break
		fi
		last=$io
		sleep 3
	done
	if proc_alive "$p" && { [ "$hung" = 1 ] || [ "$i" -ge 37 ]; }; then
		echo "# hung on the mount: $*" >&3
		proc_stacks "$p" | sed 's/^/#   /' >&3
		# The connection is named by the mount's minor device number
		# (mountinfo: no stat of a hung mount).
		conn=$(awk -v m="$(mountinfo_escape "$MNT")" \
			'$5 == m { split($3, d, ":"); n = d[2] } END { print n }' /proc/self/mountinfo)
		[ -z "$conn" ] || echo 1 >"/sys/fs/fuse/connections/$conn/abort" 2>/dev/null || true
		kill -KILL "$p" $(pgrep -P "$p") 2>/dev/null || true
		return 1
	fi
	wait "$p" 2>/dev/null || true
}

# proc_stacks PID: the kernel stacks of PID and its children.
proc_stacks() {
	local q
	for q in "$1" $(pgrep -P "$1"); do
		cat "/proc/$q/stack" 2>/dev/null
	done
}

# proc_switches PID: the context switches PID and its children have made
# (/proc/PID/status): each FUSE request a process waits for is one, so the
# count stands still only while a process waits on one request.
proc_switches() {
	local q
	for q in "$1" $(pgrep -P "$1"); do
		cat "/proc/$q/status" 2>/dev/null
	done | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }'
}

# workload ROUND: what people and tools do on a mount, each step allowed to
# fail, none to hang; the pod changes files meanwhile (Watch events to lie
# about).
workload() {
	local r=$1
	try ls -lR "$MNT"
	try find "$MNT" -newer "$MNT/f1"
	try cat "$MNT/f1" "$MNT/d/g3" "$MNT/sl" "$MNT/hl"
	try stat "$MNT/fifo" "$MNT/d" "$MNT/nope"
	printf 'pod %s\n' "$r" >>"$ROOT/f11"
	mkdir -p "$ROOT/pod$r"
	: >"$ROOT/pod$r/x"
	try sh -c "echo new > '$MNT/n$r'"
	try mkdir "$MNT/nd$r"
	try mv "$MNT/f3" "$MNT/f3.$r"
	try rm -f "$MNT/f4"
	try ln -s target "$MNT/s$r"
	try ln "$MNT/f5" "$MNT/f5.link$r"
	try touch -d '2300-01-01' "$MNT/f5"
	try chmod 600 "$MNT/f6"
	try df "$MNT"
	try getfattr -d "$MNT/f7"
	try setfattr -n user.a -v b "$MNT/f7"
	try dd if="$MNT/big" of=/dev/null bs=1M
	try dd if=/dev/zero of="$MNT/w$r" bs=64K count=20 conv=fsync
	try truncate -s 10 "$MNT/f9"
	try cp "$MNT/f10" "$MNT/f10.$r"
	# Not tar -c: told a size of 2^63 bytes, it pads the file with zeros
	# for ever, as it would on any file system that said so.
	try find "$MNT" -type f -size -1M -exec cat {} +
	try rm -rf "$MNT/nd$r" "$MNT/pod$r"
	mv "$ROOT/f12" "$ROOT/f12.$r" 2>/dev/null || true
}

# survives SEED RATE: three rounds of the workload against the liar; wsfs
# must still run and the mount must answer. Once the liar turns honest, a
# file written through the mount reads back on both sides.
survives() {
	local r
	liar "$1" "$2"
	for r in 1 2 3; do
		workload "$r"
	done
	if ! proc_alive "$WSFS_PID"; then
		echo "# wsfs died (seed $1, rate $2); its stderr:" >&3
		sed 's/^/#   /' "$WSFS_ERR" | tail -40 >&3
		return 1
	fi
	try stat "$MNT"
	: >"$CALM"
	if ! poll_until 10 sh -c "echo calm > '$MNT/calm' && grep -qx calm '$MNT/calm' &&
		grep -qx calm '$ROOT/calm'"; then
		echo "# seed $1, rate $2: the mount does not work again once agentd is honest:" >&3
		{ echo calm >"$MNT/calm" && cat "$MNT/calm" "$ROOT/calm"; stat "$MNT" "$MNT/calm"; } 2>&1 |
			sed 's/^/#   /' >&3
		echo "# wsfs's stderr:" >&3
		tail -n 20 "$WSFS_ERR" | sed 's/^/#   /' >&3
		return 1
	fi
}

# down: unmount, and stop the liar and agentd, before the next seed.
down() {
	umount_wsfs
	wsfs_wait_exit
	kill -TERM -- "-$LIAR_PID" 2>/dev/null || true
	wait_gone "$LIAR_PID" 5
	agentd_stop "$AGENTD_PID"
}

@test "a lying agentd (replies corrupted at random, 5% of fields) cannot crash wsfs or hang the mount" {
	local s
	for s in $(seeds 1 2); do
		survives "$s" 0.05
		down
	done
}

@test "a lying agentd (30% of fields, made-up Watch batches) cannot crash wsfs or hang the mount" {
	local s
	for s in $(seeds 11 12); do
		survives "$s" 0.3
		down
	done
}

@test "a lie at mount time (the root not a directory) fails the mount with a message" {
	liar_start 7 --lie root-file
	mkdir -p "$BATS_TEST_TMPDIR/mnt"
	run --separate-stderr timeout 30 "$WSFS" -o rpc_timeout=2 "unix:$LIAR_SOCK" "$BATS_TEST_TMPDIR/mnt"
	assert_status 1
	assert_eq "$stderr" "wsfs: cannot mount agentd at 'unix:$LIAR_SOCK': the workspace root is not a directory"
	run is_mounted "$BATS_TEST_TMPDIR/mnt"
	assert_status 1
}

@test "ReadDir pages whose offsets come round again fail the listing (EIO), never list for ever" {
	# Each page is a cheap call well inside rpc_timeout, and a listing in
	# progress cannot be interrupted: before, ls hung in D state.
	liar_start 7 --lie readdir-cycle
	mkdir "$ROOT/cyc"
	liar_mount
	run timeout 20 ls "$MNT/cyc"
	assert_status 2
	assert_contains "$output" "Input/output error"
	run timeout 20 ls "$MNT"
	assert_status 0
	assert_contains "$output" "cyc"
}

@test "replies agentd cannot mean (another file type, handle 0, inode 0, bytes not asked for) fail EIO, and the mount goes on" {
	liar_start 7 --lie wrong-replies
	head -c 300000 /dev/urandom >"$ROOT/big"
	liar_mount
	local what want
	# A create answered with a directory is taken for one the pod made
	# at the name meanwhile: ESTALE, the VFS looks the name up again and
	# finds the file the create made (O_EXCL: EEXIST); the handle is let go.
	for what in "create:lie-dir:EEXIST" "create:lie-h0:EIO" "mkdir:lie-d:EIO" \
		"symlink:lie-s:EIO" "mkfifo:lie-p:EIO"; do
		want=${what##*:}
		what=${what%:*}
		run pyerr "
p = sys.argv[2]
op = sys.argv[3]
if op == 'create': os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
elif op == 'mkdir': os.mkdir(p)
elif op == 'symlink': os.symlink('t', p)
else: os.mkfifo(p)" "$MNT/${what#*:}" "${what%%:*}"
		assert_eq "$output" "$want" "$what"
	done
	# An O_CREAT open of a name a lookup said missing, where the pod has a
	# FIFO: agentd opens the FIFO; wsfs says ESTALE, and the VFS looks the
	# name up again (told the truth now) and opens the FIFO itself, as a
	# local disk would (the build before gave EIO).
	mkfifo "$ROOT/lie-gone"
	run pyerr 'os.close(os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK | os.O_CREAT, 0o644))' \
		"$MNT/lie-gone"
	assert_eq "$output" OK "O_CREAT open of a FIFO a lookup said missing"
	[ -p "$MNT/lie-gone" ]
	# A writable open of lie-data brings 100,000 bytes it did not ask for.
	: >"$ROOT/lie-data"
	run pyerr 'os.close(os.open(sys.argv[2], os.O_WRONLY))' "$MNT/lie-data"
	assert_eq "$output" EIO "a writable open that brings bytes"
	: >"$ROOT/lie-ino0"
	run pyerr 'os.stat(sys.argv[2])' "$MNT/lie-ino0"
	assert_eq "$output" EIO "a stat that says inode 0"
	# Every Read brings 4,096 bytes more than asked: past the Open's
	# first 128 KiB, the read fails; the pages never grow the file.
	run sh -c 'cat "$1" >/dev/null' sh "$MNT/big"
	assert_status 1
	assert_contains "$output" "Input/output error"
	assert_eq "$(stat -c %s "$MNT/big")" 300000 "size after the reads"
	# Subdirectory listings brought along with more entries than asked
	# for are not kept: lie-pf/sub lists what the pod has. (The lie comes
	# once the watch is live and wsfs asks for subdirectories: a change
	# in the pod makes it list lie-pf again.)
	mkdir -p "$ROOT/lie-pf/sub"
	: >"$ROOT/lie-pf/sub/real"
	local i
	for ((i = 0; i < 30; i++)); do
		: >"$ROOT/lie-pf/n$i"
		sleep 0.2
		ls "$MNT/lie-pf" >/dev/null
		grep -q "prefetch lie" "$BATS_TEST_TMPDIR/liar.7.err" && break
	done
	grep -q "prefetch lie" "$BATS_TEST_TMPDIR/liar.7.err"
	assert_eq "$(ls "$MNT/lie-pf/sub")" real "lie-pf/sub after a listing that lied"
	# The mount goes on: an honest name works (every read lies), a
	# listing shows it.
	printf 'ok\n' >"$MNT/fine"
	assert_content "$ROOT/fine" $'ok\n'
	assert_eq "$(stat -c %s "$MNT/fine")" 3 "size of an honest file"
	run ls "$MNT"
	assert_status 0
	assert_contains "$output" "fine"
	proc_alive "$WSFS_PID"
}

@test "an upload into a FUSE mount in the workspace whose statfs says a block size of 0: agentd does not divide by it" {
	liar_start 7 --lie statfs-zero
	liar_mount
	assert_eq "$(stat -f -c %S "$MNT")" 0 "the mount's fundamental block size"
	# A second agentd, whose workspace holds that mount.
	bg outer "$AGENTD" --root "$BATS_TEST_TMPDIR" --listen "unix:$BATS_TEST_TMPDIR/outer.sock"
	local outer=$BG_PID
	wait_listen "unix:$BATS_TEST_TMPDIR/outer.sock" "$outer" 10
	printf 'data\n' >"$BATS_TEST_TMPDIR/up.txt"
	run --separate-stderr "$WSCTL" -a "unix:$BATS_TEST_TMPDIR/outer.sock" put \
		"$BATS_TEST_TMPDIR/up.txt" mnt/up.txt
	assert_status 0
	proc_alive "$outer"
	assert_content "$ROOT/up.txt" $'data\n'
	agentd_stop "$outer"
}

@test "a root owned by uid -1 (no one) is refused, so the kernel never stops writes to it" {
	liar_start 7 --lie root-owner
	liar_mount
	# The kernel asks for the root's attributes; kept, uid -1 would make
	# it refuse every create in the root (EACCES) for attr_timeout.
	run stat -c %u "$MNT"
	assert_status 1
	assert_contains "$output" "Input/output error"
	printf 'x\n' >"$MNT/made"
	assert_content "$ROOT/made" $'x\n'
}

@test "-o no_watch on an agentd that ignores WatchRequest.no_events: wsfs closes the stream at once and does not open it again" {
	# Such an agentd watches the whole tree (an inotify instance) and
	# streams every event, the cost -o no_watch is there to avoid.
	if wsb_runsc; then
		skip "counts agentd's inotify descriptors in /proc"
	fi
	liar_start 1 --lie old-watch
	wsfs_start -o rpc_timeout=2,no_watch -f "unix:$LIAR_SOCK"
	inotify_fds() {
		find "/proc/$AGENTD_PID/fd" -lname 'anon_inode:inotify' 2>/dev/null | wc -l
	}
	no_inotify() { [ "$(inotify_fds)" -eq 0 ]; }
	poll_until 5 grep -q "older agentd): closing the stream" "$WSFS_ERR"
	poll_until 5 no_inotify
	echo x >"$MNT/f"
	sleep 3
	assert_eq "$(inotify_fds)" 0 "agentd's inotify instances 3 s later"
	assert_eq "$(grep -c "closing the stream" "$WSFS_ERR")" 1
	assert_content "$ROOT/f" $'x\n'
}

# fsync_timed FILE: write a byte to FILE and fsync(2) it; prints "OK MS" or
# "ERRNONAME MS" (MS: how long the fsync took).
fsync_timed() {
	"$PY" - "$1" <<'PYEOF'
import errno, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"x")
t = time.monotonic()
try:
    os.fsync(fd)
    res = "OK"
except OSError as e:
    res = errno.errorcode[e.errno]
print(res, int((time.monotonic() - t) * 1000))
try:
    os.close(fd)
except OSError:
    pass
PYEOF
}

@test "C1: an fsync agentd works on past rpc_timeout succeeds while agentd answers other calls; once it answers nothing, EIO within about rpc_timeout" {
	STALL=$BATS_TEST_TMPDIR/stall
	local calm=$BATS_TEST_TMPDIR/calm res ms
	: >"$calm"
	liar_start 1 --rate 0 --calm "$calm" --stall "$STALL" --stall-on Fsync
	wsfs_start -o rpc_timeout=1 -f "unix:$LIAR_SOCK"
	# A pod whose disk takes 3 s for the fsync: 3 rpc_timeouts.
	: >"$STALL"
	(sleep 3 && rm -f "$STALL") 3>&- &
	read -r res ms < <(fsync_timed "$MNT/slow")
	assert_eq "$res" OK "fsync that took agentd 3 s"
	((ms >= 2500)) || { echo "# it returned after $ms ms: not held?" >&3; false; }
	run grep -c "unreachable" "$WSFS_ERR"
	assert_eq "$output" 0 "wsfs took a slow agentd for gone"
	assert_content "$ROOT/slow" x
	# The same, and then agentd stops answering anything (SIGSTOP).
	: >"$STALL"
	(sleep 1 && kill -STOP "$LIAR_PID") 3>&- &
	read -r res ms < <(fsync_timed "$MNT/slow2")
	kill -CONT "$LIAR_PID"
	rm -f "$STALL"
	assert_eq "$res" EIO "fsync once agentd answers nothing"
	((ms < 6000)) || { echo "# EIO came after $ms ms" >&3; false; }
	# And it carries on once agentd answers again.
	poll_until 10 bash -c '[ "$(cat "$1")" = x ] 2>/dev/null' _ "$MNT/slow"
	read -r res ms < <(fsync_timed "$MNT/slow3")
	assert_eq "$res" OK "fsync after agentd is back"
}

@test "C1: an unlink and a truncate agentd works on past rpc_timeout (a large file's blocks) succeed while agentd answers other calls" {
	STALL=$BATS_TEST_TMPDIR/stall
	local calm=$BATS_TEST_TMPDIR/calm t0 ms
	: >"$calm"
	echo data >"$ROOT/big1"
	echo data >"$ROOT/big2"
	liar_start 1 --rate 0 --calm "$calm" --stall "$STALL" --stall-on Unlink,SetAttr
	wsfs_start -o rpc_timeout=1 -f "unix:$LIAR_SOCK"
	stat "$MNT/big1" "$MNT/big2" >/dev/null
	: >"$STALL"
	(sleep 3 && rm -f "$STALL") 3>&- &
	t0=$(now_ms)
	run truncate -s 0 "$MNT/big1"
	ms=$(($(now_ms) - t0))
	assert_status 0
	((ms >= 2500)) || { echo "# truncate returned after $ms ms: not held?" >&3; false; }
	: >"$STALL"
	(sleep 3 && rm -f "$STALL") 3>&- &
	run rm "$MNT/big2"
	assert_status 0
	assert_eq "$(stat -c %s "$ROOT/big1")" 0 "POD size after truncate"
	[ ! -e "$ROOT/big2" ]
	run grep -c "unreachable" "$WSFS_ERR"
	assert_eq "$output" 0 "wsfs took a slow agentd for gone"
}

@test "an O_EXCL create whose directory the POD moves away before the reply comes succeeds; the file is where the directory went" {
	STALL=$BATS_TEST_TMPDIR/stall
	local calm=$BATS_TEST_TMPDIR/calm out=$BATS_TEST_TMPDIR/create.out pid
	: >"$calm"
	mkdir -p "$ROOT/a/b" "$ROOT/z"
	liar_start 1 --rate 0 --calm "$calm" --stall "$STALL" --stall-on Open --stall-reply
	wsfs_start -f "unix:$LIAR_SOCK"
	ls "$MNT/a/b" >/dev/null # the mount knows a and b, not z
	sleep 0.5 # past WSFS_EVENT_LATENCY_NS: the event may unbind b
	: >"$STALL"
	"$PY" -c '
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"mine\n")
    os.close(fd)
    print("OK")
except OSError as e:
    print(errno.errorcode[e.errno])
' "$MNT/a/b/lock" >"$out" 3>&- &
	pid=$!
	# agentd made the file; its reply is held. The pod moves the directory
	# into one the mount never saw: the mount's table loses its name.
	poll_until 10 test -e "$ROOT/a/b/lock"
	mv "$ROOT/a/b" "$ROOT/z/"
	sleep 1
	rm -f "$STALL"
	wait "$pid"
	assert_eq "$(cat "$out")" OK "the create's result"
	assert_content "$ROOT/z/b/lock" $'mine\n'
}

@test "R2: an open told to look again (the POD replaced the name) opens the file that lookup found, though the POD replaces the name again before the open reaches agentd" {
	# As on a local disk, where a path walk holds the inode it found:
	# before, the retried open took what the name held by then ("three")
	# and put it on the kernel inode of the file looked up ("two"), whose
	# size the kernel kept: with pods that replace a file in a loop, reads
	# cut short and mmap(2) dying of SIGBUS.
	STALL=$BATS_TEST_TMPDIR/stall
	local calm=$BATS_TEST_TMPDIR/calm out=$BATS_TEST_TMPDIR/open.out pid
	: >"$calm"
	printf 'one\n' >"$ROOT/f"
	liar_start 1 --rate 0 --calm "$calm" --stall "$STALL" --stall-on Open --stall-skip 1
	# No watch: the kernel keeps its entry of f (file "one") when the pod
	# replaces it, and the next open's first try finds another file.
	wsfs_start -f -o no_watch,entry_timeout=60,attr_timeout=60 "unix:$LIAR_SOCK"
	assert_content "$MNT/f" $'one\n'
	printf 'two two\n' >"$ROOT/f.tmp"
	mv "$ROOT/f.tmp" "$ROOT/f"
	: >"$STALL"
	"$PY" -c '
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
data = os.read(fd, 100)
m = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ)
print(size, data.decode().strip(), "|", m[:].decode().strip())
' "$MNT/f" >"$out" 2>&1 3>&- &
	pid=$!
	# The first Open found "two" where the kernel had "one" (ESTALE); the
	# VFS looked the name up again ("two"), and its Open is held here while
	# the pod replaces the name once more.
	poll_until 10 test -e "$STALL.held"
	printf 'three three three\n' >"$ROOT/f.tmp"
	mv "$ROOT/f.tmp" "$ROOT/f"
	rm -f "$STALL"
	wait "$pid"
	assert_eq "$(cat "$out")" "8 two two | two two" "fstat size, read and mmap"
	assert_content "$MNT/f" $'three three three\n'
}

@test "C1: a Release agentd never answers (while it answers the rest) holds wsfs's exit after an unmount rpc_timeout at most, not a long call's hour" {
	STALL=$BATS_TEST_TMPDIR/stall
	local calm=$BATS_TEST_TMPDIR/calm t0
	: >"$calm"
	liar_start 1 --rate 0 --calm "$calm" --stall "$STALL" --stall-on Release
	wsfs_start -f -o rpc_timeout=1 "unix:$LIAR_SOCK"
	: >"$STALL"
	echo one >"$MNT/f" # its handle goes back in a Release, held for good
	poll_until 10 test -e "$STALL.held"
	t0=$(now_ms)
	umount_wsfs
	# Before, wsfs waited for that Release as for a long call: an hour,
	# while the pinger's Stats were answered.
	wsfs_wait_exit 8
	echo "# wsfs exited $(($(now_ms) - t0)) ms after the unmount began" >&3
	assert_eq "$WSFS_STATUS" 0 "wsfs's exit status"
	rm -f "$STALL"
}

# d_threads PID: the threads of PID in uninterruptible sleep (state D), one
# "TID:WCHAN" per line.
d_threads() {
	local t
	for t in /proc/"$1"/task/*; do
		if [ "$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "$t/stat" 2>/dev/null)" = D ]; then
			echo "${t##*/}:$(cat "$t/wchan" 2>/dev/null)"
		fi
	done
}

# page_held WSFS-OPTIONS...: mount a liar that holds every Read while
# $STALL exists; read 4 KiB 2 MiB into a 4 MiB file (READER1: its pid,
# stderr in reader1.err) so that a READ stays in flight with its pages
# locked; have the pod rewrite a byte there, and wait until the watch's
# invalidation waits in the kernel on that page (a thread of wsfs in state
# D). The byte is written again every 2 s, in case the first write came
# before the reader's Read was out (a loaded machine). Fails if no thread
# waits within 20 s.
page_held() {
	STALL=$BATS_TEST_TMPDIR/stall
	local calm=$BATS_TEST_TMPDIR/calm
	: >"$calm"
	dd if=/dev/urandom of="$ROOT/cold" bs=64K count=64 2>/dev/null
	liar_start 1 --rate 0 --calm "$calm" --stall "$STALL"
	wsfs_start "$@" -f "unix:$LIAR_SOCK"
	stat "$MNT/cold" >/dev/null
	: >"$STALL"
	# 2 MiB in: past what the Open brings along, so a Read goes out.
	dd if="$MNT/cold" of=/dev/null bs=4k skip=512 count=1 \
		2>"$BATS_TEST_TMPDIR/reader1.err" 3>&- &
	READER1=$!
	sleep 0.5
	has_d() { [ -n "$(d_threads "$WSFS_PID")" ]; }
	local try
	for try in 1 2 3 4 5 6 7 8 9 10; do
		printf 'x' | dd of="$ROOT/cold" bs=1 seek=2097200 conv=notrunc 2>/dev/null
		! poll_until 2 has_d || break
	done
	if ! has_d; then
		rm -f "$STALL"
		echo "# no thread of wsfs waited in the kernel" >&3
		return 1
	fi
	echo "# waiting in the kernel: $(d_threads "$WSFS_PID" | tr '\n' ' ')" >&3
}

# conn_abort_mnt: abort the FUSE connection of $MNT by hand (a failed
# test's way out of a hung mount), and let the liar's Reads go.
conn_abort_mnt() {
	local dev
	dev=$(awk -v m="$(mountinfo_escape "$MNT")" '$5 == m { print $3 }' /proc/self/mountinfo)
	if [ -n "$dev" ]; then
		echo 1 >"/sys/fs/fuse/connections/$((${dev%%:*} << 20 | ${dev#*:}))/abort" || true
	fi
	rm -f "$STALL"
}

# wsfs_all_gone: every thread of wsfs has ended (not only its main one).
wsfs_all_gone() {
	[ "$(find "/proc/$WSFS_PID/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -le 1 ] &&
		[ -z "$(d_threads "$WSFS_PID")" ]
}

@test "wsfs crashing while the kernel holds one of its threads on a page lock aborts its connection: wsfs exits, the reader gets ENOTCONN" {
	# The page thread's invalidation locks each page of the file; a READ
	# in flight holds one. If wsfs dies then, nobody answers the READ, the
	# thread never leaves the kernel, so wsfs never finishes exiting and
	# its /dev/fuse stays open: both hang for good, unless the crash
	# handler writes the connection's abort file.
	skip_sanitized "a deliberate SIGSEGV is a sanitizer report"
	# wsfs's crash handler aborts the connection through the FUSE control
	# filesystem, which systemd mounts at boot; a machine without it (a
	# container) gets it here, as root may.
	mountpoint -q /sys/fs/fuse/connections ||
		mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null ||
		skip "no FUSE control filesystem at /sys/fs/fuse/connections"
	[ -w /sys/fs/fuse/connections ] || skip "the FUSE control filesystem is read-only"
	command -v prlimit >/dev/null || skip "no prlimit"
	local st
	page_held -o rpc_timeout=60
	prlimit --pid "$WSFS_PID" --core=0
	kill -SEGV "$WSFS_PID"
	if ! wait_gone "$READER1" 10; then
		conn_abort_mnt
		echo "# the reader still waited 10 s after wsfs crashed" >&3
		return 1
	fi
	rm -f "$STALL"
	st=0
	wait "$READER1" || st=$?
	assert_eq "$st" 1 "dd's exit status"
	assert_contains "$(cat "$BATS_TEST_TMPDIR/reader1.err")" "Transport endpoint is not connected"
	poll_until 10 wsfs_all_gone || true
	assert_eq "$(d_threads "$WSFS_PID")" "" "threads of wsfs still in the kernel"
	st=0
	wait "$WSFS_PID" || st=$?
	assert_eq "$st" $((128 + 11)) "wsfs's exit status (SIGSEGV)"
}

@test "an agentd from before HandleRequest.more (one handle per Release): wsfs releases the rest one by one, and agentd keeps none" {
	liar_start 1 --lie old-release
	wsfs_start -o rpc_timeout=5 -f "unix:$LIAR_SOCK"
	mkdir "$MNT/rel"
	# 100 made at once, then closed in a row: their handles go back in
	# batches, the first of which such an agentd answers released 0.
	open_all_then_close "$MNT/rel" 100
	none_held() { [ "$(open_under "$AGENTD_PID" "$ROOT/rel")" = 0 ]; }
	if ! poll_until 10 none_held; then
		echo "# agentd still holds $(open_under "$AGENTD_PID" "$ROOT/rel") of them" >&3
		return 1
	fi
	assert_contains "$(cat "$WSFS_ERR")" "releasing one by one"
	# and so do later ones
	echo x >"$MNT/rel/g"
	assert_content "$ROOT/rel/g" $'x\n'
	poll_until 10 none_held
}
