#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# agentd inside gVisor (`runsc do`, ptrace platform, --network=none): what
# gVisor does differently and the other suites cannot show, checked where it
# matters (docs/gvisor.md). Runs under WSB_RUNSC=1 only, i.e. in
# `meson test --suite gvisor` (tests/integration/gvisor-run), which also
# re-runs the wsctl, exec, transfer, devagent, escapes and fs suites against
# an agentd in gVisor. The pod side is the sandbox: pod_run runs a command
# in agentd's sandbox (runsc exec).

load test_helper

# No test may hang the suite.
BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-300}

setup() {
	wsb_runsc || skip "runs under WSB_RUNSC=1 (meson test --suite gvisor)"
	need_runsc
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
}

teardown() {
	fs_teardown
}

# gv_sh SCRIPT: run /bin/sh -c SCRIPT in a sandbox of its own, set up as
# agentd's (the gvisor-agentd wrapper with /bin/sh in agentd's place).
gv_sh() {
	WSB_AGENTD=/bin/sh runsc_safe_stdio "$GVISOR_AGENTD" -c "$1"
}

@test "gVisor has no openat2 (ENOSYS): agentd's own walk keeps a final symlink to a directory outside" {
	# The premise: agentd's sandbox answers openat2(2) with ENOSYS.
	agentd_unix
	run pod_run "$PY" -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(437, -100, b"/", b"\0" * 24, 24)
print(os.strerror(ctypes.get_errno()) if r < 0 else "openat2 works")'
	assert_status 0
	assert_eq "$output" "Function not implemented" "openat2 in the sandbox"
	# gVisor follows a final symlink on O_RDONLY|O_DIRECTORY|O_NOFOLLOW;
	# resolve.c must not open (or list) what it points to.
	mkdir -p "$BATS_TEST_TMPDIR/outside/sub"
	echo secret >"$BATS_TEST_TMPDIR/outside/secret"
	ln -s ../outside "$ROOT/up"
	ln -s "$BATS_TEST_TMPDIR/outside" "$ROOT/abs"
	run "$PY" - "$ADDR" <<-'EOF'
	import sys, grpc, wsbtest
	from wsbtest import pb, pbg
	ws = pbg.WorkspaceStub(wsbtest.channel(sys.argv[1]))
	for name in (b"up", b"abs", b"up/", b"./up"):
	    for what, call in (("ReadDir", lambda: ws.ReadDir(pb.ReadDirRequest(path=name), timeout=15)),
	                       ("Open O_DIRECTORY", lambda: ws.Open(pb.OpenRequest(
	                           path=name, access=pb.RDONLY, directory=True), timeout=15))):
	        try:
	            call()
	            print("%s %s: succeeded" % (what, name.decode()))
	        except grpc.RpcError as e:
	            print("%s %s: %s" % (what, name.decode(), e.code().name))
	EOF
	assert_status 0
	assert_eq "$output" "$(for n in up abs up/ ./up; do
		printf 'ReadDir %s: PERMISSION_DENIED\nOpen O_DIRECTORY %s: PERMISSION_DENIED\n' "$n" "$n"
	done)"
}

@test "gVisor keeps no birth time and gives no file handles: agentd's Attr.btime_ns and Attr.generation are 0 (wsfs goes by the inode number, which gVisor never reuses)" {
	agentd_unix
	run pod_run "$PY" -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fh = ctypes.create_string_buffer((128).to_bytes(4, "little") + bytes(4 + 128))
mount_id = ctypes.c_int()
r = libc.syscall(303, -100, b"/", fh, ctypes.byref(mount_id), 0)
print(os.strerror(ctypes.get_errno()) if r < 0 else "name_to_handle_at works")'
	assert_status 0
	printf '# name_to_handle_at(2) in the sandbox: %s\n' "$output" >&3
	[ "$output" != "name_to_handle_at works" ]
	echo x >"$ROOT/f"
	run "$PY" - "$ADDR" <<-'EOF'
	import sys, wsbtest
	from wsbtest import pb, pbg
	ws = pbg.WorkspaceStub(wsbtest.channel(sys.argv[1]))
	a = ws.Stat(pb.StatRequest(path=b"f"), timeout=15).attr
	print(a.btime_ns, a.generation)
	EOF
	assert_status 0
	assert_eq "$output" "0 0" "Attr.btime_ns and Attr.generation of a file in the sandbox"
}

@test "--stdio through runsc: wsctl --exec carries a session; nothing of runsc's on stdout" {
	local exec_cmd="$GVISOR_AGENTD --root $ROOT --stdio" null
	null=$(stat -c '%U:%G %a' /dev/null)
	printf 'from the host\n' >"$BATS_TEST_TMPDIR/h.txt"
	run --separate-stderr "$WSCTL" --exec "$exec_cmd" health
	assert_status 0
	assert_eq "$output" SERVING
	run --separate-stderr "$WSCTL" --exec "$exec_cmd" put "$BATS_TEST_TMPDIR/h.txt" h.txt
	assert_status 0
	assert_content "$ROOT/h.txt" $'from the host\n'
	run --separate-stderr bash -c 'printf "a\nb\n" | "$0" --exec "$1" exec -i -- sh -c "cat; echo \$\$"' \
		"$WSCTL" "$exec_cmd"
	assert_status 0
	# stdin reached the command; it ran as a child of agentd, PID 1.
	assert_eq "${output%$'\n'*}" $'a\nb'
	# With stdin at EOF agentd exits 0 and its stdout holds no byte but
	# HTTP/2 frames (here: none at all, or only a SETTINGS frame).
	local st=0
	"$GVISOR_AGENTD" --root "$ROOT" --stdio </dev/null >"$BATS_TEST_TMPDIR/stdout" \
		2>"$BATS_TEST_TMPDIR/stderr" || st=$?
	assert_eq "$st" 0 "exit status of agentd --stdio at EOF"
	run "$PY" - "$BATS_TEST_TMPDIR/stdout" <<-'EOF'
	import sys
	data = open(sys.argv[1], "rb").read()
	pos = 0
	while pos + 9 <= len(data):
	    n = int.from_bytes(data[pos:pos + 3], "big")
	    if data[pos + 3] > 9 or n > 16384:
	        sys.exit("not HTTP/2 at %d: %r" % (pos, data[pos:pos + 32]))
	    pos += 9 + n
	if pos != len(data):
	    sys.exit("stray bytes: %r" % data[pos:pos + 32])
	EOF
	assert_status 0
	# The wrapper never hands runsc a device: /dev/null kept its owner
	# and mode (runsc chowns what it is given as stdio to the sandbox's
	# user; compared with before, not with root:root, which a run by hand
	# of runsc itself could have changed already).
	assert_eq "$(stat -c '%U:%G %a' /dev/null)" "$null" "owner and mode of /dev/null"
}

@test "agentd listens on TCP on the sandbox's own loopback (as a kubectl-exec'd relay reaches it)" {
	local port
	port=$(free_port)
	run gv_sh "
		$WSB_AGENTD --root $ROOT --listen 127.0.0.1:$port 2>/dev/null &
		i=0
		until $WSCTL -a 127.0.0.1:$port health 2>/dev/null; do
			i=\$((i + 1)); [ \$i -lt 100 ] || exit 1; sleep 0.1
		done
		echo inside >$ROOT/t.txt
		$WSCTL -a 127.0.0.1:$port cat t.txt
		kill -TERM \$!; wait \$!"
	assert_status 0
	assert_eq "$output" $'SERVING\ninside'
}

@test "agentd is PID 1 in the sandbox and reaps the orphans of the commands it runs" {
	agentd_unix
	run --separate-stderr "$WSCTL" exec -- sh -c 'echo $PPID; (sleep 0.3 &); (sleep 0.2 & sleep 0.1 &); true'
	assert_status 0
	assert_eq "$output" 1 "the command's parent"
	# Orphans re-parented to agentd were waited for: nothing but agentd
	# left, no zombie (runsc ps lists zombies too).
	local sb i
	mapfile -t sb < <(runsc_sandboxes)
	assert_eq "${#sb[@]}" 1 "sandboxes"
	for ((i = 0; i < 50; i++)); do
		run "$RUNSC" --root "${sb[0]% *}" ps --format json "${sb[0]#* }"
		[ "$output" != "[1]" ] || break
		sleep 0.1
	done
	assert_eq "$output" "[1]" "pids in the sandbox"
}

@test "process groups: --timeout kills a command's whole group in the sandbox" {
	agentd_unix
	run --separate-stderr "$WSCTL" exec --timeout 1 -- sh -c 'sleep 100 & echo $! > bg.pid; sleep 100'
	assert_status 124
	pod_wait_gone "$(cat "$ROOT/bg.pid")" 5
	run pod_proc_alive 1
	assert_status 0
}

@test "PTY: a command gets a terminal in the sandbox" {
	agentd_unix
	run --separate-stderr timeout 30 "$WSCTL" exec -t -- sh -c 'tty; stty size; test -t 0 && echo tty-in'
	assert_status 0
	assert_eq "${output//$'\r'/}" $'/dev/pts/0\n24 80\ntty-in'
}

@test "changes made in the pod (the sandbox) show on the mount at once: inotify sees them" {
	need_wsfs
	agentd_unix
	mount_wsfs -o rpc_timeout=2
	ls -A "$MNT" >/dev/null
	[ ! -e "$MNT/new" ]
	pod_run sh -c 'echo v1 > "$1/new"; mkdir "$1/d"; echo b > "$1/d/b"' _ "$ROOT"
	poll_until 1 content_is "$MNT/new" $'v1\n' || { echo "# create: not on MNT after $POLL_MS ms" >&3; false; }
	poll_until 1 content_is "$MNT/d/b" $'b\n' || { echo "# mkdir: not on MNT after $POLL_MS ms" >&3; false; }
	pod_run sh -c 'mv "$1/d/b" "$1/d/c"; echo v2 >> "$1/new"; rm "$1/new"; chmod 600 "$1/d/c"' _ "$ROOT"
	poll_until 1 test ! -e "$MNT/d/b" || { echo "# rename: old name still on MNT" >&3; false; }
	poll_until 1 test ! -e "$MNT/new" || { echo "# unlink: still on MNT" >&3; false; }
	poll_until 1 content_is "$MNT/d/c" $'b\n'
	poll_until 1 bash -c '[ "$(stat -c %a "$1")" = 600 ]' _ "$MNT/d/c" ||
		{ echo "# chmod: MNT shows $(stat -c %a "$MNT/d/c")" >&3; false; }
	# Appends from the mount and from the pod interleave whole.
	: >"$MNT/log"
	pod_run sh -c 'for i in $(seq 200); do echo "pod line $i" >> "$1/log"; done' _ "$ROOT" &
	local i pod=$!
	for ((i = 1; i <= 200; i++)); do
		echo "mnt line $i" >>"$MNT/log"
	done
	wait "$pod"
	poll_until 2 bash -c '[ "$(wc -l < "$1")" = 400 ]' _ "$MNT/log"
	assert_eq "$(grep -c '^pod line [0-9]*$' "$ROOT/log")" 200 "whole pod lines"
	assert_eq "$(grep -c '^mnt line [0-9]*$' "$ROOT/log")" 200 "whole mount lines"
}

@test "a reader on the mount part-way through a cached listing while the pod removes names it read gets every other name once" {
	need_wsfs
	# Made before agentd starts, so its first walk watches the directory
	# (gVisor's inotify never sees what the host does).
	mkdir "$ROOT/big"
	"$PY" -c 'import sys
for i in range(3000):
    open("%s/entry_%06d_%s" % (sys.argv[1], i, "p" * (i % 40)), "w").close()' "$ROOT/big"
	agentd_unix
	mount_wsfs -d -o rpc_timeout=2
	cached "$MNT/big" 3000
	local t=$BATS_TEST_TMPDIR reader
	mkfifo "$t/ready" "$t/go"
	"$PY" - "$MNT/big" "$t" >"$t/out" <<'PY' &
import os, sys
mnt, t = sys.argv[1:3]
before = set(os.listdir(mnt))
it = os.scandir(mnt)                      # from the kernel's cache
seen = [next(it).name for _ in range(300)]
with open(os.path.join(t, "gone"), "w") as f:
    f.write("".join(n + "\n" for n in seen[:200]))
open(os.path.join(t, "ready"), "w").close()
open(os.path.join(t, "go")).read()
seen += [e.name for e in it]              # after the pod's change
kept = before - set(seen[:200])
print("kept", len(kept), "missing", len(kept - set(seen)), "twice", len(seen) - len(set(seen)))
PY
	reader=$!
	cat "$t/ready"
	pod_run sh -c 'cd "$1" && xargs rm -- <"$2"' _ "$ROOT/big" "$t/gone"
	poll_until 5 test ! -e "$MNT/big/$(tail -n 1 "$t/gone")" ||
		{ echo "# the pod's removals never reached the mount" >&3; echo go >"$t/go"; false; }
	echo go >"$t/go"
	wait "$reader"
	assert_eq "$(cat "$t/out")" "kept 2800 missing 0 twice 0"
}

@test "a program built on the mount runs in the pod" {
	need_wsfs
	command -v cc >/dev/null || skip "no cc"
	agentd_unix
	mount_wsfs
	printf 'int main(){return 7;}' >"$MNT/t.c"
	(cd "$MNT" && cc t.c -o t)
	run pod_run "$ROOT/t"
	assert_status 7
}

@test "an open file that lost its name opens anew through /proc/self/fd on the mount, O_TRUNC too" {
	need_wsfs
	agentd_unix
	mount_wsfs
	# fsx unlink_open has these steps, but gVisor's nlink of such a file
	# keeps that case out of the run below; and gVisor refuses O_TRUNC
	# on this open (docs/gvisor.md), which agentd works around.
	run "$PY" - "$MNT" <<-'EOF'
	import os, sys
	x, new = sys.argv[1] + "/x", sys.argv[1] + "/x.new"
	for path, data in ((x, b"old"), (new, b"new")):
	    with open(path, "wb") as f:
	        f.write(data)
	fd = os.open(x, os.O_RDWR)
	os.rename(new, x)
	proc = "/proc/self/fd/%d" % fd
	with open(proc, "rb") as f:
	    print(f.read().decode())
	os.close(os.open(proc, os.O_WRONLY | os.O_TRUNC))
	print(os.fstat(fd).st_size, os.pread(fd, 8, 0), open(x, "rb").read().decode())
	os.unlink(x)
	with open(proc, "r+b") as f:
	    f.write(b"again")
	print(os.pread(fd, 8, 0).decode())
	EOF
	assert_eq "$output" $'old\n0 b\'\' new\nagain'
}

# fsx cases whose answers gVisor's file system (the gofer, runsc
# 0.0~20221219) can give as Linux does; the others, with the reason:
#   seek         SEEK_DATA/SEEK_HOLE: no holes reported, the whole file is data
#   unlink_open  fstat of an open, unlinked file shows nlink 1, not 0
#   rename       renameat2 flags (NOREPLACE, EXCHANGE): EINVAL
#   stat, mknod  FIFOs and sockets show nlink 2
#   xattr        user.* xattrs: EOPNOTSUPP
#   fallocate    KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE: EOPNOTSUPP
#   attrs        until fsops.c falls back to /proc/self/fd for chown and
#                for utimensat on a symlink (docs/gvisor.md)
GV_FSX_CASES=(open_flags rw truncate links dirs getdents copy_range statfs fsync access names
	mmap locks interrupts)

@test "fsx on a wsfs mount over agentd in gVisor: the cases its file system answers as Linux does" {
	need_wsfs
	[ -x "$FSX" ] || skip "fsx is not built ($FSX)"
	mkdir -p "$BATS_TEST_TMPDIR/local"
	agentd_unix
	mount_wsfs
	local c args=()
	for c in "${GV_FSX_CASES[@]}"; do
		args+=(-c "$c")
	done
	run timeout 280 "$FSX" -n 1000 -t 120 "${args[@]}" "$BATS_TEST_TMPDIR/local" "$MNT"
	if [ "$status" -ne 0 ]; then
		printf '%s\n' "$output" | grep -v '^ok ' | sed 's/^/#   /' >&3
		return 1
	fi
	assert_contains "$output" " 0 mismatches"
}
