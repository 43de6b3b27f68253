#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
#
# wsfs and the other side: changes made in the pod show on the mount at once
# (R1, R2: the pod is agentd's root directory, written directly, through
# `wsctl exec`, and through Dev_Agent's CreateFiles), names are carried byte
# for byte, hard links and symlinks keep their identity, appends from both
# sides interleave whole, and losing agentd (C1) fails calls within a bound
# instead of hanging, with the mount working again once agentd is back.
# Cases: /work/shared/cases/fs-cases.md.

load test_helper

# No test may hang the suite.
BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-120}

# Seconds every wsfs call may wait for an unreachable agentd (-o rpc_timeout).
RPC_TIMEOUT=2
# How long a pod-side change may take to show on the mount, seconds.
VISIBLE=1

setup() {
	need_wsfs
	ROOT="$BATS_TEST_TMPDIR/root"
	mkdir -p "$ROOT"
	LATENCIES=
}

teardown() {
	fs_teardown
	if [ -n "${LOOP_ROOT:-}" ]; then
		umount "$LOOP_ROOT" || umount -l "$LOOP_ROOT"
	fi
	if [ -n "${NOBODY_DIR:-}" ]; then
		rm -rf "$NOBODY_DIR"
	fi
	if [ -n "${IMMUTABLE[*]:-}" ]; then
		chattr -i "${IMMUTABLE[@]}" 2>/dev/null || true
	fi
	local m
	for m in ${NESTED_MOUNTS:-}; do
		umount "$m" || umount -l "$m"
	done
}

# up_nobody: start agentd as user nobody (agentd_nobody: the pod is
# NOBODY_DIR/root) and mount it.
up_nobody() {
	agentd_nobody
	# shellcheck disable=SC2153 # NOBODY_ADDR: set by agentd_nobody
	ADDR=$NOBODY_ADDR mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
}

# up [tcp]: start agentd (unix socket, or TCP) and mount it.
up() {
	if [ "${1:-unix}" = tcp ]; then
		agentd_tcp
	else
		agentd_unix
	fi
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
}

# visible WHAT CMD...: CMD (a check on MNT) succeeds within $VISIBLE s;
# records the latency, or shows WHAT and fails.
visible() {
	local what=$1
	shift
	if ! poll_until "$VISIBLE" "$@"; then
		echo "# $what: not visible on MNT after $POLL_MS ms" >&3
		return 1
	fi
	LATENCIES+="$what=${POLL_MS}ms "
}

show_latencies() {
	echo "# latencies: $LATENCIES" >&3
}

# listing_is DIR NAME...: DIR lists exactly NAME... (sorted, like ls -A).
listing_is() {
	local dir=$1
	shift
	[ "$(find -H "$dir" -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort)" = "$(printf '%s\n' "$@" | LC_ALL=C sort)" ]
}

absent() {
	[ ! -e "$1" ] && [ ! -L "$1" ]
}

mode_is() {
	[ "$(stat -c %a "$1")" = "$2" ]
}

mtime_is() {
	[ "$(stat -c %.9Y "$1")" = "$2" ]
}

size_is() {
	[ "$(stat -c %s "$1")" = "$2" ]
}

@test "R1: a file a command run through wsctl exec or ExecuteCommands creates is on MNT when the call returns, though MNT had found the name missing just before" {
	# agentd sends a command's exit once the mount acknowledged its
	# changes (watch_barrier(), WatchSync); before, the exit could
	# overtake them and a lookup right after it was answered from the
	# mount's knowledge that the name was missing (ENOENT, 1 run in 30).
	up
	local i fails=0 t0 t1
	for ((i = 0; i < 40; i++)); do
		[ ! -e "$MNT/out$i" ]
		"$WSCTL" -a "$ADDR" exec -- sh -c "echo $i > out$i"
		[ "$(cat "$MNT/out$i" 2>/dev/null)" = "$i" ] || fails=$((fails + 1))
	done
	assert_eq "$fails" 0 "wsctl exec runs that read no file"
	run "$PY" "$PYTESTS/wsbcall.py" devagent-reads "$ADDR" "$MNT" 20
	assert_status 0
	assert_eq "$output" "failed 0"

	# A mount that does not acknowledge (stopped) holds an exit 100 ms
	# (EXIT_BARRIER_MS), no longer; it catches up once it runs again.
	kill -STOP "$WSFS_PID"
	t0=$(now_ms)
	"$WSCTL" -a "$ADDR" exec -- sh -c 'echo late > late'
	t1=$(now_ms)
	kill -CONT "$WSFS_PID"
	[ $((t1 - t0)) -ge 100 ] && [ $((t1 - t0)) -lt 3000 ] || {
		echo "# exit with the mount stopped: $((t1 - t0)) ms, not 100 to 3000" >&3
		return 1
	}
	assert_eq "$(cat "$MNT/late")" late
}

@test "R1: the POD's rename right after MNT's exchange and rename is seen at once: the old name is gone, the new one is the moved file" {
	up
	local d=$MNT/d
	mkdir "$d"
	echo X >"$d/x"
	echo A >"$d/a"
	# a <-> x (renameat2 RENAME_EXCHANGE), then nb -> c, then in the POD
	# a -> c: that MOVED event was taken for the echo of the mount's own
	# renames (a was one's source, c the other's target), and the kernel
	# kept its entry of a for watch_timeout (60 s).
	run "$PY" -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 2):
    sys.exit(os.strerror(ctypes.get_errno()))' "$d/a" "$d/x"
	if [ "$status" != 0 ] && wsb_runsc; then
		skip "the sandbox's renameat2 has no RENAME_EXCHANGE: $output"
	fi
	assert_status 0
	assert_eq "$(cat "$d/a")" X "a after the exchange"
	echo data >"$d/nb"
	mv -T "$d/nb" "$d/c"
	"$WSCTL" -a "$ADDR" exec --cwd d -- mv -T a c
	run stat -c %i "$d/a"
	assert_status 1
	assert_eq "$(cat "$d/c")" X "c"
	assert_eq "$(stat -c %i "$d/c")" "$("$WSCTL" -a "$ADDR" exec --cwd d -- stat -c %i c)" "c's inode"
	assert_eq "$(cat "$d/x")" A "x"
}

@test "a directory made through MNT or in the POD keeps its atime: agentd's walk of it is no access" {
	wsb_runsc && skip "the sandbox keeps its own times"
	up
	mkdir "$MNT/made" "$BATS_TEST_TMPDIR/local"
	mkdir "$ROOT/pod"
	mkdir "$BATS_TEST_TMPDIR/local/made"
	sleep 0.5 # agentd has walked both (to watch what comes into them)
	assert_eq "$(stat -c %x "$ROOT/made")" "$(stat -c %y "$ROOT/made")" "atime = mtime of made"
	assert_eq "$(stat -c %x "$ROOT/pod")" "$(stat -c %y "$ROOT/pod")" "atime = mtime of pod"
	assert_eq "$(stat -c %x "$BATS_TEST_TMPDIR/local/made")" "$(stat -c %y "$BATS_TEST_TMPDIR/local/made")" "local"
}

@test "R1: a file the POD creates shows on MNT at once, even after MNT looked for it" {
	up
	# The kernel has listed the root and cached that 'new' does not exist.
	ls -A "$MNT" >/dev/null
	run stat "$MNT/new"
	assert_status 1
	run cat "$MNT/new"
	assert_status 1
	printf 'v1\n' >"$ROOT/new"
	visible "created: content" content_is "$MNT/new" $'v1\n'
	visible "created: listed" listing_is "$MNT" new
	# A directory and a file in it.
	ls -A "$MNT" >/dev/null
	mkdir -p "$ROOT/d/e"
	echo deep >"$ROOT/d/e/f"
	visible "mkdir -p: content" content_is "$MNT/d/e/f" $'deep\n'
	visible "mkdir -p: listed" listing_is "$MNT" new d
	# Many files in a directory the mount has listed.
	ls -A "$MNT/d" >/dev/null
	touch "$ROOT/d/"{a,b,c,d,e,f,g,h}
	visible "8 creates: listed" listing_is "$MNT/d" a b c d e f g h
	show_latencies
}

@test "R1: a name the POD makes in a directory the mount just listed shows at once to a lookup loop" {
	wsb_runsc && skip "changes the pod's files from the host; gVisor's inotify sees only changes made in the sandbox"
	up tcp
	# A lookup that came between the kernel's invalidation and the drop
	# of the directory's known names was answered missing from them, and
	# the kernel kept that for watch_timeout (60 s): 31 of 40 here.
	local k stuck=0 t0
	ls "$MNT" >/dev/null # the root listed whole: its names are known
	for k in $(seq 20); do
		mkdir "$ROOT/rq$k"
		sleep 0.02 # the event of the mkdir in first: the listing is trusted
		ls "$MNT/rq$k" >/dev/null
		echo v >"$ROOT/rq$k/f0"
		t0=$SECONDS
		until [ -e "$MNT/rq$k/f0" ]; do
			if ((SECONDS - t0 >= 3)); then
				echo "# rq$k/f0 still missing on MNT after 3 s" >&3
				stuck=$((stuck + 1))
				break
			fi
		done
	done
	assert_eq "$stuck" 0 "names missing on MNT"
}

@test "R1: an unchanged directory is listed from the kernel's cache; a change in the POD drops it" {
	agentd_unix
	mount_wsfs -d -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir -p "$ROOT/c"
	touch "$ROOT/c/a" "$ROOT/c/b"
	listing_is "$MNT/c" a b
	listing_is "$MNT/c" a b
	local n0 n1
	n0=$(readdirs)
	# FOPEN_CACHE_DIR + FOPEN_KEEP_CACHE: the kernel answers by itself.
	listing_is "$MNT/c" a b
	ls -la "$MNT/c" >/dev/null
	n1=$(readdirs)
	assert_eq "$n1" "$n0" "READDIR requests for an unchanged, cached directory"
	# A change in the pod: the watch drops the cached listing.
	touch "$ROOT/c/x"
	visible "created in a cached listing" listing_is "$MNT/c" a b x
	rm "$ROOT/c/a"
	visible "removed from a cached listing" listing_is "$MNT/c" b x
	# And a change through the mount, at once.
	touch "$MNT/c/y"
	listing_is "$MNT/c" b x y
	[ "$(readdirs)" -gt "$n1" ]
}

@test "R1: a reader part-way through a cached listing while the POD removes and adds names gets every other name once" {
	agentd_unix
	mount_wsfs -d -o "rpc_timeout=$RPC_TIMEOUT"
	# The kernel serves the reader from its cached listing; the pod's
	# change drops that cache mid-read, and the kernel goes on with a
	# READDIRPLUS at the offset of the last name it gave: that offset must
	# mean the same place in the new listing (it once was an index into
	# the listing, so as many names as were removed went unseen).
	mkdir "$ROOT/big"
	"$PY" -c 'import sys
for i in range(3000):
    open("%s/entry_%06d_%s" % (sys.argv[1], i, "p" * (i % 40)), "w").close()' "$ROOT/big"
	cached "$MNT/big" 3000
	run "$PY" - "$ROOT/big" "$MNT/big" <<'PY'
import os, sys, time
pod, mnt = sys.argv[1], sys.argv[2]
before = set(os.listdir(mnt))
it = os.scandir(mnt)
seen = [next(it).name for _ in range(300)]
gone = seen[:200]
for name in gone:
    os.unlink(os.path.join(pod, name))
for i in range(100):
    open(os.path.join(pod, "late_%03d" % i), "w").close()
deadline = time.time() + 5      # until the mount took the change in
while os.path.lexists(os.path.join(mnt, gone[-1])) and time.time() < deadline:
    time.sleep(0.02)
seen += [e.name for e in it]
kept = before - set(gone)
print("kept", len(kept), "missing", len(kept - set(seen)),
      "twice", len(seen) - len(set(seen)))
PY
	assert_status 0
	assert_eq "$output" "kept 2800 missing 0 twice 0"
}

@test "R1: after a rewinddir served from the kernel's cache, a handle that had listed before neither misses nor revives names" {
	agentd_unix
	mount_wsfs -d -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir "$ROOT/d"
	"$PY" -c 'import sys
for i in range(3000):
    open("%s/e_%05d" % (sys.argv[1], i), "w").close()' "$ROOT/d"
	cached "$MNT/d" 3000
	run "$PY" - "$ROOT/d" "$MNT/d" "$WSFS_ERR" <<'PY'
import ctypes, os, subprocess, sys, time
pod, mnt, log = sys.argv[1:4]
libc = ctypes.CDLL(None, use_errno=True)
class Dirent(ctypes.Structure):
    _fields_ = [("ino", ctypes.c_uint64), ("off", ctypes.c_int64),
                ("reclen", ctypes.c_ushort), ("type", ctypes.c_ubyte),
                ("name", ctypes.c_char * 256)]
libc.opendir.restype = ctypes.c_void_p
libc.readdir.restype = ctypes.POINTER(Dirent)
libc.readdir.argtypes = libc.rewinddir.argtypes = [ctypes.c_void_p]
def read(d, n=None):
    out = []
    while n is None or len(out) < n:
        e = libc.readdir(d)
        if not e:
            break
        name = e.contents.name.decode()
        if name not in (".", ".."):
            out.append(name)
    return out
def gone_on_mount(name):     # the mount took the pod's change in
    for _ in range(250):
        if not os.path.lexists(os.path.join(mnt, name)):
            return
        time.sleep(0.02)
    sys.exit("the mount never saw %s go" % name)
def cached(n):               # a whole listing from the kernel's cache
    for _ in range(100):
        before = open(log).read().count("opcode: READDIR")
        if len(os.listdir(mnt)) == n and open(log).read().count("opcode: READDIR") == before:
            return
        time.sleep(0.05)
    sys.exit("the listing never came from the kernel's cache")
a = libc.opendir(mnt.encode())
first = read(a, 100)                        # from the kernel's cache
os.unlink(os.path.join(pod, first[0]))
gone_on_mount(first[0])
read(a, 1500)                               # uncached: a listing on a's handle
for i in range(200):
    open(os.path.join(pod, "new_%03d" % i), "w").close()
old = sorted(n for n in os.listdir(pod) if n.startswith("e_"))[-200:]
for n in old:
    os.unlink(os.path.join(pod, n))
gone_on_mount(old[-1])
cached(3000 - 1 - 200 + 200)
at_rewind = set(os.listdir(pod))
libc.rewinddir(ctypes.c_void_p(a))
seen = read(a, 100)                         # from the kernel's cache again
os.unlink(os.path.join(pod, seen[50]))
gone_on_mount(seen[50])
seen += read(a)                             # uncached, at the 100th name
libc.closedir(ctypes.c_void_p(a))
kept = at_rewind - {seen[50]}
print("missed", len(kept - set(seen)), "revived", len(set(seen) - at_rewind),
      "twice", len(seen) - len(set(seen)))
PY
	assert_status 0
	assert_eq "$output" "missed 0 revived 0 twice 0"
}

@test "R1: a handle that read to the end, rewound into a newer cached listing, still gets the name the POD added past its old end" {
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir "$ROOT/d" "$ROOT/s"
	"$PY" -c 'import sys
for i in range(1000):
    open("%s/n_%05d" % (sys.argv[1], i), "w").close()' "$ROOT/s"
	run env PYTHONPATH="$PYTESTS" "$PY" - "$ROOT" "$MNT" <<'PY'
import os, sys, time
from dents import getdents64 as getdents
pod, mnt = sys.argv[1:3]
def wait(cond):
    for _ in range(250):
        if cond():
            return
        time.sleep(0.02)
    sys.exit("the mount never took the pod's change in")
# A name has the same offset in any directory: d gets the 100 names of
# lowest offset in s, and later one from the middle, past d's end.
sd = os.open(os.path.join(mnt, "s"), os.O_RDONLY | os.O_DIRECTORY)
sc = []
while r := getdents(sd, 65536):
    sc += [x for x in r if x[0].startswith("n_")]
sc.sort(key=lambda x: x[1])
for n, o in sc[:100]:
    open(os.path.join(pod, "d", n), "w").close()
new = sc[500][0]
md = os.path.join(mnt, "d")
wait(lambda: os.path.lexists(os.path.join(md, sc[99][0])))  # not a listing:
a = os.open(md, os.O_RDONLY | os.O_DIRECTORY)              # a's handle lists d
got = []
while r := getdents(a, 32):      # one entry a call, to the end
    got += r
last = got[-1][0]
gone = got[2][0]
# Each pod change: wait until the mount took it in (the watch dropped d's
# attributes with its cached listing: a new mtime), not just until a
# lookup finds the name (agentd answers that before the watch reports).
m = os.stat(md).st_mtime_ns
open(os.path.join(pod, "d", new), "w").close()
wait(lambda: os.stat(md).st_mtime_ns != m)
b = os.open(md, os.O_RDONLY | os.O_DIRECTORY)
while getdents(b, 65536):        # another handle: the kernel caches the new listing
    pass
os.lseek(a, 0, os.SEEK_SET)      # a rewinds, reads from the cache up to its old end
seen = []
while r := getdents(a, 32):
    seen += r
    if r[-1][0] == last:
        break
m = os.stat(md).st_mtime_ns
os.unlink(os.path.join(pod, "d", gone))        # drops the cache under a
wait(lambda: os.stat(md).st_mtime_ns != m)
while r := getdents(a, 32):
    seen += r
print("new name seen:", new in [n for n, o in seen])
PY
	assert_status 0
	assert_eq "$output" "new name seen: True"
}

# mount_vs_local: run the Python script on stdin (argv[1]: the directory to
# work in) on $MNT and on a local directory; their outputs in out_mnt and
# out_local (the mount's also shown on fd 3), to be the same.
mount_vs_local() {
	local script d
	script=$(cat)
	mkdir "$BATS_TEST_TMPDIR/local"
	for d in "$MNT" "$BATS_TEST_TMPDIR/local"; do
		"$PY" - "$d" >"$BATS_TEST_TMPDIR/out" <<<"$script"
		if [ "$d" = "$MNT" ]; then out_mnt=$(cat "$BATS_TEST_TMPDIR/out"); else out_local=$(cat "$BATS_TEST_TMPDIR/out"); fi
	done
	printf '%s\n' "$out_mnt" | sed 's/^/# mount: /' >&3
}

@test "a directory removed through the mount while it is a process's cwd and open: ls, stat and fstat of it work, as on a local disk" {
	up
	# Everything but the inode number, which differs.
	mount_vs_local <<'PY'
import os, stat, subprocess, sys
top = sys.argv[1] + "/rd"
os.mkdir(top)
os.chmod(top, 0o750)
fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
os.chdir(top)
os.rmdir(top)
def show(what, f):
    try:
        st = f()
        print(what, stat.filemode(st.st_mode), st.st_nlink)
    except OSError as e:
        print(what, "error", e.strerror)
show("stat .", lambda: os.stat("."))
show("fstat fd", lambda: os.fstat(fd))
r = subprocess.run(["ls", "-a"], capture_output=True, text=True)
print("ls", r.returncode, repr(r.stdout), repr(r.stderr))
try:
    open("x", "w")
    print("create: ok")
except OSError as e:
    print("create:", e.strerror)
PY
	assert_eq "$out_mnt" "$out_local"
	assert_contains "$out_mnt" "stat . drwxr-x--- 0"
}

@test "the POD removes, renames or replaces a host process's cwd or open file: the process stays with its own directory or file, as on a local disk" {
	# wsfs reaches a file by its node's path: without following the
	# pod's renames, a cwd the pod made anew took files into the new
	# directory, and fchmod or truncate of an open file the pod had
	# replaced changed the new file (tests/python/pod_renames.py).
	up
	mkdir "$BATS_TEST_TMPDIR/local"
	run "$PY" "$PYTESTS/pod_renames.py" "$BATS_TEST_TMPDIR/local" "$BATS_TEST_TMPDIR/local" 0
	assert_status 0
	local want=$output
	run "$PY" "$PYTESTS/pod_renames.py" "$MNT" "$ROOT" 0.3
	assert_status 0
	printf '%s\n' "$output" | sed 's/^/# mount: /' >&3
	assert_eq "$output" "$want"
	assert_contains "$output" "B: the pod has it under the new name: True"
	assert_contains "$output" "D: reads through /proc/self/fd: old"
	# The pod's change 80 ms after the host's chdir or open: its event
	# comes while the mount's lookup is recent (watch.c bound_lately(),
	# 200 ms), when a lookup may be newer than the event; wsfs asks
	# agentd what the names hold. Without that the renamed cwds lost
	# their names (B, C, G) and the replaced file's descriptor read the
	# new file (D).
	run "$PY" "$PYTESTS/pod_renames.py" "$MNT/soon" "$ROOT/soon" 0.3 0.08
	assert_status 0
	assert_eq "$output" "$want"
}

@test "fchmod and futimens of an open file reach it when the POD renamed it right after the open: with the watch (the event comes while the lookup is recent) and without (no event; the node keeps the old name)" {
	# With the watch, by the path both failed ENOENT (the node did not
	# follow a rename whose event came within 200 ms of its lookup);
	# without it they still do by the path: an open file of the node is
	# its file for sure (fs.c ws_setattr()).
	agentd_unix
	local opts
	for opts in "" ",no_watch"; do
		mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT$opts"
		run "$PY" - "$MNT" "$ROOT" "${opts#,}" <<'PY'
import os, sys, time
mnt, root, tag = sys.argv[1], sys.argv[2], sys.argv[3]
for i in range(3):
    f, g = "f%s%d" % (tag, i), "g%s%d" % (tag, i)
    fd = os.open(os.path.join(mnt, f), os.O_CREAT | os.O_WRONLY, 0o644)
    os.rename(os.path.join(root, f), os.path.join(root, g))
    time.sleep(0.3)
    os.fchmod(fd, 0o600)
    os.utime(fd, (5, 5))
    os.close(fd)
    st = os.stat(os.path.join(root, g))
    print("%o %d" % (st.st_mode & 0o777, st.st_mtime))
PY
		assert_status 0
		assert_eq "$output" "$(printf '600 5\n%.0s' 1 2 3)"
		umount_wsfs
	done
}

@test "xattr calls on an open file reach it: when the POD renamed another file over its name, and once it is unlinked" {
	# They went by the node's path: fsetxattr(2) changed the file the pod
	# had put there (the kernel names no handle for them), and on an
	# unlinked file they failed ESTALE (a local disk's work).
	if wsb_runsc; then
		skip "gVisor's file systems keep no user xattrs (EOPNOTSUPP)"
	fi
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	run "$PY" - "$MNT" "$ROOT" <<'PY'
import os, sys, time
mnt, root = sys.argv[1], sys.argv[2]
fd = os.open(os.path.join(mnt, "x"), os.O_CREAT | os.O_RDWR, 0o644)
os.setxattr(fd, "user.a", b"mine")
os.link(os.path.join(root, "x"), os.path.join(root, "keep"))  # the opened file
with open(os.path.join(root, "x.new"), "w") as f:
    f.write("other")
os.rename(os.path.join(root, "x.new"), os.path.join(root, "x"))
for wait in (0, 0.3):  # before and after the pod's events reach the mount
    time.sleep(wait)
    os.setxattr(fd, "user.b%d" % (wait * 10), b"b")
    print(sorted(os.listxattr(fd)), os.getxattr(fd, "user.a"))
print("pod x:", sorted(os.listxattr(os.path.join(root, "x"))))
print("pod keep:", sorted(os.listxattr(os.path.join(root, "keep"))))
os.close(fd)
fd = os.open(os.path.join(mnt, "u"), os.O_CREAT | os.O_RDWR, 0o644)
os.setxattr(fd, "user.pre", b"p")
os.unlink(os.path.join(mnt, "u"))
os.setxattr(fd, "user.post", b"q")
os.removexattr(fd, "user.pre")
print("unlinked:", sorted(os.listxattr(fd)), os.getxattr(fd, "user.post"))
os.close(fd)
PY
	assert_status 0
	assert_eq "$output" "['user.a', 'user.b0'] b'mine'
['user.a', 'user.b0', 'user.b3'] b'mine'
pod x: []
pod keep: ['user.a', 'user.b0', 'user.b3']
unlinked: ['user.post'] b'q'"
}

@test "R2: a file the POD replaces by rename in a tight loop opens whole on MNT: fstat's size is the bytes read, and a mmap(2) of it reads them" {
	# The file system hands the freed inode number to the next version
	# at once: wsfs tells versions apart by birth time (Attr.btime_ns).
	# Before, two versions shared one kernel inode (reads cut to or
	# padded to the other's size), and an open that raced two renames
	# left the old i_size under the new file (mmap(2) died of SIGBUS):
	# every run of this failed so.
	up
	run "$PY" "$PYTESTS/pod_replace_read.py" "$MNT" "$ROOT" 4 0
	printf '# %s\n' "$output" >&3
	assert_status 0
	assert_contains "$output" " 0 differ, 0 ESTALE"
}

@test "R2: a file the POD replaces by rename in a tight loop while other processes open it: a reader's bytes are its file's, never padded to another's size, and the name is found (one miss let pass)" {
	# Two openers beside the reader: an open whose VFS retry lost to the
	# pod again got the new file on the kernel inode the reader had open,
	# and gave that inode the new file's size: the reader's read(2) ran
	# on past its own file's end into zeros (8 of 4,067 reads in 30 s);
	# once repeats pinned the file their lookup found, a pinned open put
	# an older file beside such a newer one (about one run in eight), and
	# a repeat whose pin another process's repeat had taken failed ENOENT
	# (2 to 4 "gone" in every run; now about 1 in 20,000 opens with four
	# openers: one is let pass).
	up
	run "$PY" "$PYTESTS/pod_replace_read.py" "$MNT" "$ROOT" 6 0 rename 2
	printf '# %s\n' "$output" >&3
	assert_status 0
	assert_contains "$output" " 0 differ, 0 ESTALE, "
	local gone=${output##*ESTALE, }
	gone=${gone%% gone*}
	[ "$gone" -le 1 ]
}

@test "R2: a file the POD removes and writes anew in a tight loop: opens on MNT never fail ESTALE, read(2) gives at least fstat(2)'s size, and a mmap(2) of it reads those bytes" {
	# The watch's invalidations of the file (its creation, write and
	# removal) cross the kernel's GETATTRs, whose attributes it then
	# drops while fstat(2) returns them: i_size stayed short of that
	# size, and the mmap(2) died of SIGBUS (status 135) in every run of
	# this before wsfs made i_size cover it (fs.c getattr_reply()).
	# Opens failed ESTALE (a quarter of them) when the VFS's one retry
	# lost to the pod too, and reads gave 0 bytes of a file fstat(2)
	# had just called longer (the bytes Open brought along of the file
	# it found empty).
	up
	run "$PY" "$PYTESTS/pod_replace_read.py" "$MNT" "$ROOT" 4 0 rewrite
	printf '# %s\n' "$output" >&3
	assert_status 0
	assert_contains "$output" " 0 differ, 0 read short, 0 ESTALE"
}

@test "a directory replaced by rename(2) through the mount while it is a process's cwd and open: ls, stat and fstat of it work, as on a local disk" {
	up
	mount_vs_local <<'PY'
import os, stat, subprocess, sys
top = sys.argv[1] + "/rd"
os.mkdir(top)
os.chmod(top, 0o750)
os.mkdir(top + ".new")
fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
os.chdir(top)
os.rename(top + ".new", top)
def show(what, f):
    try:
        st = f()
        print(what, stat.filemode(st.st_mode), st.st_nlink)
    except OSError as e:
        print(what, "error", e.strerror)
show("stat .", lambda: os.stat("."))
show("fstat fd", lambda: os.fstat(fd))
show("stat new", lambda: os.stat(top))
r = subprocess.run(["ls", "-a"], capture_output=True, text=True)
print("ls", r.returncode, repr(r.stdout), repr(r.stderr))
PY
	assert_eq "$out_mnt" "$out_local"
	assert_contains "$out_mnt" "stat . drwxr-x--- 0"
}

@test "a directory removed in the POD while a reader on MNT is part-way through it: getdents64 fails ENOENT, as on ext4" {
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir "$ROOT/d"
	"$PY" -c 'import sys
for i in range(3000):
    open("%s/e_%05d" % (sys.argv[1], i), "w").close()' "$ROOT/d"
	# (readdir(3) in glibc takes ENOENT for the end, so the system call)
	run env PYTHONPATH="$PYTESTS" "$PY" - "$ROOT/d" "$MNT/d" <<'PY'
import os, shutil, sys, time
from dents import getdents64
pod, mnt = sys.argv[1:3]
fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
first = len(getdents64(fd, 1024))
shutil.rmtree(pod)
for _ in range(250):
    if not os.path.lexists(mnt):
        break
    time.sleep(0.02)
try:
    print(first > 0, len(getdents64(fd, 1024)), "")
except OSError as e:
    print(first > 0, -1, e.strerror)
PY
	assert_status 0
	assert_eq "$output" "True -1 No such file or directory"
	# One not read yet, removed whole: its listing from the start, and
	# fstat(2) of it (the kernel asks with no file handle for a
	# directory), end ENOENT too, not ESTALE (the node has no name left).
	mkdir -p "$MNT/e/f"
	run "$PY" - "$ROOT/e/f" "$MNT/e/f" <<'PY'
import os, sys, time
pod, mnt = sys.argv[1:3]
fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
os.rmdir(pod)
for _ in range(250):
    if not os.path.lexists(mnt):
        break
    time.sleep(0.02)
out = []
for call in (lambda: os.listdir(fd), lambda: os.fstat(fd)):
    try:
        call()
        out.append("ok")
    except OSError as e:
        out.append(e.strerror)
print(", ".join(out))
PY
	assert_status 0
	assert_eq "$output" "No such file or directory, No such file or directory"
}

@test "a directory past -o max_dir_entries fails to list with EFBIG and a message; one at the limit lists" {
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,max_dir_entries=100"
	mkdir "$ROOT/at" "$ROOT/past"
	(cd "$ROOT/at" && seq -f 'n%03g' 1 100 | xargs touch)
	(cd "$ROOT/past" && seq -f 'n%03g' 1 101 | xargs touch)
	run ls "$MNT/at"
	assert_status 0
	assert_eq "$(printf '%s\n' "$output" | wc -l)" 100
	run ls "$MNT/past"
	assert_status 2
	assert_contains "$output" "File too large"
	assert_contains "$(cat "$WSFS_ERR")" "listing of 'past' stopped past 100 entries"
	# the mount goes on
	rm "$ROOT/past/n101"
	visible "a name removed in the pod" listing_is "$MNT/past" $(seq -f 'n%03g' 1 100)
}

@test "R1: names the POD creates or removes in directories the mount just made show at once" {
	up
	# wsfs knows every name of a directory it made, and answers lookups of
	# missing names itself; the pod's changes must still show.
	mkdir "$MNT/n"
	run stat "$MNT/n/f"
	assert_status 1
	printf 'v\n' >"$ROOT/n/f"
	visible "created in a directory made on MNT" content_is "$MNT/n/f" $'v\n'
	mkdir "$MNT/n/s"
	touch "$MNT/n/s/own"
	mkdir "$ROOT/n/s/t"
	printf 'w\n' >"$ROOT/n/s/t/g"
	visible "created two levels down" content_is "$MNT/n/s/t/g" $'w\n'
	rm "$ROOT/n/s/own"
	visible "removed by the pod" absent "$MNT/n/s/own"
	touch "$MNT/n/s/own"
	[ -e "$ROOT/n/s/own" ]
	# A name the mount removed and the pod made again.
	rm "$MNT/n/s/own"
	run stat "$MNT/n/s/own"
	assert_status 1
	printf 'again\n' >"$ROOT/n/s/own"
	visible "made again by the pod" content_is "$MNT/n/s/own" $'again\n'
	listing_is "$MNT/n/s" own t
	show_latencies
}

# calls METHOD: how many METHOD calls agentd answered so far (its debug log).
calls() {
	grep -c "wsbridge.v1.Workspace/$1: " "$AGENTD_ERR" || true
}

# calls_settled METHOD: calls METHOD once its count has stayed the same for
# 0.3 s (at most 5 s): the watch thread may still be asking what a name
# holds for an event the test already saw through the mount (watch.c asks
# when the name's node was bound less than WSFS_EVENT_LATENCY_NS, 200 ms,
# before the event).
calls_settled() {
	local n m i
	n=$(calls "$1")
	for i in $(seq 1 50); do
		sleep 0.3
		m=$(calls "$1")
		[ "$m" = "$n" ] && break
		n=$m
	done
	echo "$n"
}

@test "op streams: the mount's calls travel as messages of a stream per thread (Workspace/Ops); -o op_streams=0 makes each its own call" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir "$MNT/os"
	echo one >"$MNT/os/f"
	assert_content "$ROOT/os/f" $'one\n'
	local ops unary
	ops=$(grep -c "wsbridge.v1.Workspace/[A-Za-z]*: .*(op)$" "$AGENTD_ERR" || true)
	unary=$(grep "wsbridge.v1.Workspace/[A-Za-z]*: " "$AGENTD_ERR" |
		grep -v "(op)$" | grep -cv "Workspace/\(Watch\|Ops\): " || true)
	echo "# calls as ops: $ops; other unary calls: $unary" >&3
	[ "$ops" -ge 3 ] # mkdir, create, write, release...
	assert_eq "$unary" 0
	umount_wsfs
	wsfs_wait_exit
	: >"$AGENTD_ERR"
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,op_streams=0"
	echo two >"$MNT/os/g"
	assert_content "$ROOT/os/g" $'two\n'
	assert_eq "$(grep -c '(op)$' "$AGENTD_ERR" || true)" 0
	[ "$(calls Write)" -ge 1 ]
}

@test "R1: find on a fresh mount lists a whole tree in one ReadDir; a change in the POD still shows" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	# The watch must be live for the prefetch: wait until a pod-side
	# change shows (the mount starts before the stream is up).
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	# Made after the mount listed anything.
	mkdir -p "$ROOT/t/a/b/c" "$ROOT/t/d" "$ROOT/t/e/f"
	touch "$ROOT/t/a/1" "$ROOT/t/a/b/2" "$ROOT/t/a/b/c/3" "$ROOT/t/e/f/4"
	visible "tree made in the pod" content_is "$MNT/t/e/f/4" ""
	local n0 n1
	n0=$(calls ReadDir)
	run find "$MNT/t"
	assert_status 0
	assert_eq "$(printf '%s\n' "${lines[@]#"$MNT/"}" | LC_ALL=C sort | tr '\n' ' ')" \
		"t t/a t/a/1 t/a/b t/a/b/2 t/a/b/c t/a/b/c/3 t/d t/e t/e/f t/e/f/4 "
	n1=$(calls ReadDir)
	assert_eq "$((n1 - n0))" 1 "ReadDir calls for find over 7 directories"
	# Each directory's own attributes came along (DirListing.attr): du
	# stats every directory find listed (the kernel dropped their atimes)
	# without a Stat call, and sees what the pod sees.
	n0=$(calls_settled Stat)
	run du -s --inodes "$MNT/t"
	assert_status 0
	assert_eq "${output%%$'\t'*}" 11 "du's count of files and directories"
	n1=$(calls Stat)
	assert_eq "$((n1 - n0))" 0 "Stat calls for du over the listed tree"
	# A prefetched listing is not used once the pod changed something.
	ls "$MNT" >/dev/null
	touch "$ROOT/t/a/b/new"
	visible "created under a prefetched tree" listing_is "$MNT/t/a/b" 2 c new
}

@test "a directory listed through the mount is stat'ed without a Stat call, with the atime the listing gave it in the POD" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	# Made after the mount listed anything (no prefetched listing of it),
	# with an atime older than its mtime, which a listing moves
	# (relatime).
	mkdir "$ROOT/L"
	touch "$ROOT/L/a" "$ROOT/L/b"
	touch -a -d 2001-01-01 "$ROOT/L"
	atime_old() { [ "$(stat -c %X "$MNT/L")" = 978307200 ]; }
	visible "the old atime" atime_old
	local n0 n1
	n0=$(calls_settled Stat)
	# opendir(3) and readdir(3), no stat(2) of it.
	assert_eq "$("$PY" -c 'import os, sys; print(" ".join(sorted(os.listdir(sys.argv[1]))))' \
		"$MNT/L")" "a b"
	# The kernel dropped its atime (a READDIR went out): GETATTR.
	assert_eq "$(stat -c %X "$MNT/L")" "$(stat -c %X "$ROOT/L")" "atime through the mount"
	n1=$(calls Stat)
	assert_eq "$((n1 - n0))" 0 "Stat calls for the listing and the stat"
	# An own change in it drops what the listing kept: mtime is the pod's.
	touch "$MNT/L/c"
	assert_eq "$(stat -c %Y.%y "$MNT/L")" "$(stat -c %Y.%y "$ROOT/L")" "mtime after a create"
	rm "$MNT/L/a"
	assert_eq "$(stat -c %Y.%y.%h "$MNT/L")" "$(stat -c %Y.%y.%h "$ROOT/L")" "after an unlink"
	mkdir "$MNT/L/d"
	"$PY" -c 'import os, sys; os.listdir(sys.argv[1])' "$MNT/L"
	assert_eq "$(stat -c %h.%y "$MNT/L")" "$(stat -c %h.%y "$ROOT/L")" "nlink after a mkdir"
	# And so does a chmod of it (a GETATTR forced at once, before the
	# watch's event of it).
	"$PY" -c 'import os, sys; os.listdir(sys.argv[1])' "$MNT/L"
	chmod 700 "$MNT/L"
	assert_eq "$(stat --cached=never -c %a "$MNT/L")" 700 "mode after a chmod"
}

@test "releases: the handles of 100 files made on MNT and closed at once go back to agentd in a few Release calls; moments later agentd holds none of them" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir "$MNT/rel"
	local i n0 n1
	n0=$(calls Release)
	# All made at once, then closed in a row: with nothing written, a
	# close asks agentd nothing (its FLUSH has no bytes to send), so under
	# gVisor too the 100 come within a few times the 5 ms a queued handle
	# waits (with a byte each, each FLUSH sent a Write: 12 calls in CI).
	open_all_then_close "$MNT/rel" 100
	assert_content "$ROOT/rel/f99" ""
	if ! wsb_runsc; then
		# agentd's own descriptors (not gVisor's gofer's)
		visible "every handle released" none_open_under "$AGENTD_PID" "$ROOT/rel"
	fi
	sleep 0.1 # the last batch waits 5 ms at most
	n1=$(calls Release)
	echo "# Release calls for 100 files closed: $((n1 - n0))" >&3
	# One per file before; now a batch per 5 ms or per 64 handles.
	[ "$((n1 - n0))" -ge 2 ] && [ "$((n1 - n0))" -le 25 ] ||
		{ echo "$((n1 - n0)) Release calls for 100 files, want 2-25" >&2; return 1; }
	# With -o gather_ms=0 there is no thread to send batches: one each.
	fusermount3 -u "$MNT"
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,gather_ms=0"
	n0=$(calls Release)
	for i in $(seq 20); do
		echo "$i" >"$MNT/rel/g$i"
	done
	# close(2) returns after FLUSH; the kernel sends RELEASE after it, so
	# the last one may still be on its way (19 seen once in CI).
	releases_since() { [ "$(($(calls Release) - $1))" -ge "$2" ]; }
	poll_until 5 releases_since "$n0" 20 || true
	sleep 0.1 # and no more than one each
	n1=$(calls Release)
	assert_eq "$((n1 - n0))" 20 "Release calls for 20 files with gather_ms=0"
}

# random_reads [OPTS]: mount with -o OPTS added, read 300 random 4 KiB
# blocks of $ROOT/f through it (each checked against the pod's bytes) and
# unmount; READS: the Read calls agentd had for them.
random_reads() {
	local n0
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT${1:+,$1}"
	n0=$(calls Read)
	run_py chunk_reads.py random "$MNT/f" "$ROOT/f" 300
	READS=$(($(calls Read) - n0))
	fusermount3 -u "$MNT"
	echo "# Read calls for 300 random reads of 4 MiB${1:+ with $1}: $READS" >&3
}

@test "chunk reads: 4 KiB reads at 300 random places of a 4 MiB file read the pod's bytes in about one Read per 128 KiB chunk; with -o read_chunk_kb=0 one Read each" {
	agentd_unix --log-level debug
	pod_run "$PY" "$PYTESTS/chunk_reads.py" make "$ROOT/f" 4 1
	# The rest of each chunk is in the page cache: 32 chunks (a READ that
	# comes while its chunk is being stored asks again).
	random_reads
	[ "$READS" -le 48 ] || { echo "$READS Read calls, want 48 at most" >&2; return 1; }
	random_reads read_chunk_kb=0
	[ "$READS" -ge 200 ] ||
		{ echo "$READS Read calls with read_chunk_kb=0, want one per read" >&2; return 1; }
	# 1 MiB chunks: a READ across a chunk's end asks for its own bytes
	# (two chunks would be more than one Read may ask: EINVAL).
	random_reads read_chunk_kb=1024
}

@test "chunk reads: a file the pod rewrites in place while the mount reads it at random places reads as the pod's last version once the pod stops" {
	up
	pod_run "$PY" "$PYTESTS/chunk_reads.py" make "$ROOT/f" 4 1
	# A chunk read before a rewrite and stored after its invalidation
	# would stay in the page cache for good (the watch keeps it).
	bg reader "$PY" "$PYTESTS/chunk_reads.py" reader "$MNT/f" 4
	local reader=$BG_PID
	pod_run "$PY" "$PYTESTS/chunk_reads.py" rewrite "$ROOT/f" 30
	wait "$reader"
	visible "the pod's last version" "$PY" "$PYTESTS/chunk_reads.py" same "$MNT/f" "$ROOT/f"
	sleep 0.5 # chunks still queued then have been stored or dropped
	run_py chunk_reads.py same "$MNT/f" "$ROOT/f"
}

@test "chunk reads: after random reads of a file, a write and a truncate through the mount are what a descriptor open all along reads; the size stays the truncated one" {
	up
	pod_run "$PY" "$PYTESTS/chunk_reads.py" make "$ROOT/f" 4 1
	run_py chunk_reads.py own "$MNT/f"
	run_py chunk_reads.py same "$MNT/f" "$ROOT/f"
	assert_eq "$(stat -c %s "$ROOT/f")" 1048676 "the pod's size after the truncate"
}

@test "R1: rm -rf on MNT lists each directory once, though rm opens it twice; a directory that changes between the opens is listed anew" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local i j n0 n1
	for i in $(seq 12); do
		mkdir -p "$ROOT/rt/d$i/s"
		for j in $(seq 40); do
			: >"$ROOT/rt/d$i/f$j"
		done
	done
	visible "tree made in the pod" content_is "$MNT/rt/d12/f40" ""
	n0=$(calls ReadDir)
	rm -rf "$MNT/rt"
	n1=$(calls ReadDir)
	[ ! -e "$ROOT/rt" ] || { echo "rt is still in the pod" >&2; return 1; }
	# 25 directories: rm(1) (fts) opens each, reads a page, and opens it
	# again to read it all; the second opendir takes the listing the
	# first one fetched (twice as many calls before).
	echo "# ReadDir calls for rm -rf of 25 directories: $((n1 - n0))" >&3
	[ "$((n1 - n0))" -le 25 ] || { echo "$((n1 - n0)) ReadDir calls, want <= 25" >&2; return 1; }
	# A listing kept for the next opendir goes once anything changes.
	mkdir "$MNT/kd"
	touch "$MNT/kd/a"
	ls "$MNT/kd" >/dev/null
	pod_run touch "$ROOT/kd/b" # inside the sandbox: gVisor's inotify sees only those
	visible "made in the POD after the listing" listing_is "$MNT/kd" a b
	touch "$MNT/kd/c"
	listing_is "$MNT/kd" a b c || { echo "kd: $(find "$MNT/kd" -mindepth 1 -printf '%f '), want a b c" >&2; return 1; }
}

@test "R2: Open brings a file's first bytes along; a write in between, here or in the POD, is never missed" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local i n0 n1
	for i in 1 2 3 4 5; do
		printf 'file %s\n' "$i" >"$ROOT/s$i"
	done
	head -c 300000 /dev/urandom >"$ROOT/big"
	n0=$(calls Read)
	for i in 1 2 3 4 5; do
		assert_content "$MNT/s$i" "file $i"$'\n'
	done
	n1=$(calls Read)
	assert_eq "$((n1 - n0))" 0 "Read calls for 5 small files (Open brought them)"
	cmp "$ROOT/big" "$MNT/big"
	# Opened, then written through another descriptor, then read.
	printf 'old contents\n' >"$ROOT/w"
	run python3 - "$MNT/w" <<'PY'
import sys
p = sys.argv[1]
r = open(p, "rb", buffering=0)
with open(p, "r+b", buffering=0) as w:
    w.write(b"NEW")
print(r.read().decode(), end="")
PY
	assert_status 0
	assert_eq "$output" "NEW contents"
	# Opened, then rewritten in place in the pod, then read.
	printf 'pod before\n' >"$ROOT/p"
	run python3 - "$MNT/p" "$ROOT/p" <<'PY'
import os, sys, time
mnt, pod = sys.argv[1], sys.argv[2]
r = open(mnt, "rb", buffering=0)
with open(pod, "r+b") as w:
    w.write(b"POD")
deadline = time.time() + 2
while True:
    os.lseek(r.fileno(), 0, os.SEEK_SET)
    got = r.read()
    if got.startswith(b"POD") or time.time() > deadline:
        break
    time.sleep(0.01)
print(got.decode(), end="")
PY
	assert_status 0
	assert_eq "$output" "POD before"
}

@test "R2: a file the POD rewrites in place just before the mount opens it reads whole: not cut to, nor padded to, the size the mount knew" {
	up
	# The pod's change event is still on its way when open(2) comes:
	# open asks agentd, but the kernel's size was the old file's, and the
	# read stopped there ("v00" of "v000": 75 of 100 rounds) or went on
	# with zeros ("bye" then 8 NULs).
	run "$PY" - "$MNT" "$ROOT" <<'PY'
import os, sys
mnt, pod = sys.argv[1], sys.argv[2]
os.mkdir(mnt + "/t")
bad = 0
for i in range(200):
    old, new = (b"one", b"v%03d" % i) if i % 2 else (b"hello world %03d" % i, b"bye")
    with open("%s/t/f%d" % (mnt, i), "wb") as f:
        f.write(old)
    os.stat("%s/t/f%d" % (mnt, i))
    with open("%s/t/f%d" % (pod, i), "r+b") as f:  # same inode
        f.write(new)
        f.truncate(len(new))
    with open("%s/t/f%d" % (mnt, i), "rb") as f:
        got = f.read()
    if got != new:
        bad += 1
        if bad <= 5:
            print("round %d: read %r, the pod holds %r" % (i, got, new))
print("%d of 200 reads differ from the pod's file" % bad)
sys.exit(1 if bad else 0)
PY
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
}

@test "R2: the echo of the mount's own change costs no call (the event brings the attributes); the pod's change still shows" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local i n0 n1
	ls "$MNT" >/dev/null # new names here are then known missing: no lookup call
	n0=$(calls_settled Stat)
	for i in 1 2 3 4 5 6 7 8; do
		printf 'own %s\n' "$i" >"$MNT/o$i"
		chmod 600 "$MNT/o$i"
	done
	# Events come in order: once this shows, the echoes before it are done.
	printf 'mark\n' >"$ROOT/probe"
	visible "a pod change after the own ones" content_is "$MNT/probe" $'mark\n'
	n1=$(calls Stat)
	# The probe's lookup calls, and now and then an echo that agentd
	# stat'ed while a chmod was still running (then wsfs asks). chmod's
	# stat after each write (the kernel drops the cached mtime) used to
	# cost one call per file (8-9 here) and each of the 3 echoes per file
	# one more (33).
	echo "# Stat calls for 8 own writes and chmods: $((n1 - n0))" >&3
	[ "$((n1 - n0))" -le 5 ] || { echo "$((n1 - n0)) Stat calls for 8 own writes and chmods" >&2; return 1; }
	# What stat(2) says after an own write is what the pod has.
	local f
	for f in o1 o8; do
		printf 'longer now\n' >>"$MNT/$f"
		assert_eq "$(stat -c '%s %Y %a %i' "$MNT/$f")" "$(stat -c '%s %Y %a %i' "$ROOT/$f")"
	done
	# Still the page cache of an own file, yet a pod-side rewrite shows.
	assert_content "$MNT/o3" $'own 3\n'
	printf 'pod 3\n' >"$ROOT/o3"
	visible "the pod rewrote an own file" content_is "$MNT/o3" $'pod 3\n'
	chmod 640 "$ROOT/o5"
	visible "the pod chmod'ed an own file" mode_is "$MNT/o5" 640
}

@test "R2: temporary names made, linked and unlinked (git's objects) keep a directory's names known; the pod's changes there still show" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	mkdir "$MNT/objs"
	local n0 n1
	n0=$(grep -c 'Stat: NOT_FOUND' "$AGENTD_ERR" || true)
	# As git writes a loose object: look, create a temporary name, write,
	# close, link it to its final name, unlink the temporary one. Each
	# step's echo may come after the next step (agentd reads inotify 2 ms
	# late), and the temporary name may be gone when agentd sends it.
	run "$PY" - "$MNT/objs" <<'PY'
import os, sys
d = sys.argv[1]
for i in range(40):
    h, t = os.path.join(d, "h%d" % i), os.path.join(d, "tmp%d" % i)
    if os.path.exists(h):
        sys.exit("%s exists" % h)
    fd = os.open(t, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o444)
    os.write(fd, b"object %d\n" % i)
    os.close(fd)
    os.link(t, h)
    os.unlink(t)
PY
	assert_status 0
	# Events come in order: once this shows, the echoes before it are done.
	printf 'mark\n' >"$ROOT/probe"
	visible "a pod change after the own ones" content_is "$MNT/probe" $'mark\n'
	n1=$(grep -c 'Stat: NOT_FOUND' "$AGENTD_ERR" || true)
	# Every lookup of a missing name above was answered by wsfs itself;
	# an echo taken for the pod's change used to drop what it knew of the
	# directory, and then each of them cost a call (about 120 here).
	echo "# Stat calls for missing names in 40 object writes: $((n1 - n0))" >&3
	[ "$((n1 - n0))" -le 2 ] || { echo "$((n1 - n0)) Stat calls for missing names" >&2; return 1; }
	local names
	mapfile -t names < <(seq -f 'h%g' 0 39)
	listing_is "$MNT/objs" "${names[@]}"
	assert_content "$MNT/objs/h7" $'object 7\n'
	# The pod's changes in that directory still show: a new name, and a
	# temporary name made again right after the mount removed it (the
	# file may get the same inode number back).
	printf 'pod\n' >"$ROOT/objs/tmp39"
	visible "the pod made a name the mount had removed" content_is "$MNT/objs/tmp39" $'pod\n'
	rm "$ROOT/objs/h3"
	visible "the pod removed a linked name" absent "$MNT/objs/h3"
}

@test "R1: with whole-second timestamps, the POD's file at a name the mount just removed, and the POD's chmod back to an earlier mode, show" {
	# ext4 with 128-byte inodes keeps whole seconds, so two states of a
	# file within one second can look the same but for the contents; a
	# freed inode number comes back at once.
	truncate -s 64M "$BATS_TEST_TMPDIR/c.img"
	mkfs.ext4 -q -F -I 128 "$BATS_TEST_TMPDIR/c.img" 2>/dev/null || skip "mkfs.ext4 -I 128 failed"
	mount -o loop "$BATS_TEST_TMPDIR/c.img" "$ROOT" 2>/dev/null || skip "no loop device here"
	LOOP_ROOT=$ROOT
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	run "$PY" - "$MNT" "$ROOT" <<'PY'
import os, sys, time
M, R = sys.argv[1:3]
os.mkdir(M + "/d")
reused = 0
for i in range(20):
    t = "d/t%d" % i
    fd = os.open(M + "/" + t, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, b"A")
    os.close(fd)
    ino = os.stat(M + "/" + t).st_ino
    os.unlink(M + "/" + t)
    # The mount's next request waits for an unlink it answered before
    # agentd had done it (fusefs/fs.c "Unlink-behind").
    assert not os.path.exists(M + "/" + t)
    # The pod makes the name again: the same inode number, the same second.
    fd = os.open(R + "/" + t, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, b"B")
    os.close(fd)
    reused += os.stat(R + "/" + t).st_ino == ino
for i in range(20):
    with open("%s/f%d" % (R, i), "w") as f:
        f.write("0000")
time.sleep(1.2)
for i in range(20):
    f = "%s/f%d" % (M, i)
    os.stat(f)
    fd = os.open(f, os.O_WRONLY)
    os.write(fd, b"aaaa")
    os.close(fd)
    os.chmod(f, 0o600)
    os.chmod("%s/f%d" % (R, i), 0o644)  # the pod, back to the mode before
# A stale view lasts watch_timeout (60 s): looking for 5 s tells.
deadline = time.monotonic() + 5
while True:
    missing = [i for i in range(20) if not os.path.exists("%s/d/t%d" % (M, i))]
    modes = [i for i in range(20) if os.stat("%s/f%d" % (M, i)).st_mode & 0o777 != 0o644]
    if not missing and not modes or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print("inode numbers reused %d/20; names missing %s; stale modes %s" % (reused, missing, modes))
sys.exit(1 if missing or modes else 0)
PY
	echo "# $output" >&3
	assert_status 0
}

@test "R2: the POD's append right after the mount's own rename shows (agentd folds it into the MOVED)" {
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	run "$PY" - "$MNT" "$ROOT" <<'PY'
import os, sys, time
M, R = sys.argv[1:3]
for i in range(20):
    with open("%s/m%d" % (R, i), "w") as f:
        f.write("a\n")
time.sleep(1.2)
for i in range(20):
    os.rename("%s/m%d" % (M, i), "%s/n%d" % (M, i))
    os.stat("%s/n%d" % (M, i))
    with open("%s/n%d" % (R, i), "a") as f:  # the pod, at once
        f.write("pod\n")
deadline = time.monotonic() + 5
while True:
    stale = [i for i in range(20) if os.stat("%s/n%d" % (M, i)).st_size != 6]
    if not stale or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print("stale sizes after an own rename: %s" % stale)
sys.exit(1 if stale else 0)
PY
	echo "# $output" >&3
	assert_status 0
}

@test "R2: the POD's write right after the mount's own create shows (agentd folds it into the CREATED and says so)" {
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	run "$PY" - "$MNT" "$ROOT" <<'PY'
import os, sys, time
M, R = sys.argv[1:3]
for i in range(20):
    os.close(os.open("%s/c%d" % (M, i), os.O_CREAT | os.O_WRONLY, 0o644))  # create here
    with open("%s/c%d" % (R, i), "a") as f:  # the pod, at once
        f.write("pod\n")
    os.chmod("%s/c%d" % (R, i), 0o600)
    # Apart: no other event races the create's reply (whose attributes
    # the kernel then keeps for watch_timeout).
    time.sleep(0.1)
# The same in a directory the mount just made (agentd lists it before it
# gets its events), and the pod's chmod of that directory.
for i in range(20):
    os.mkdir("%s/n%d" % (M, i))
    os.close(os.open("%s/n%d/f" % (M, i), os.O_CREAT | os.O_WRONLY, 0o644))
    with open("%s/n%d/f" % (R, i), "a") as f:
        f.write("pod\n")
    os.chmod("%s/n%d/f" % (R, i), 0o600)
    os.chmod("%s/n%d" % (R, i), 0o700)
    # and the pod's touch -d of a directory right after the mount made it
    os.mkdir("%s/n%d/t" % (M, i))
    os.utime("%s/n%d/t" % (R, i), (1000000000, 1000000000))
    time.sleep(0.1)
time.sleep(1)
mode = lambda p: (lambda s: (s.st_size, s.st_mode & 0o777))(os.stat(p))
deadline = time.monotonic() + 5
while True:
    stale = [i for i in range(20) if mode("%s/c%d" % (M, i)) != (4, 0o600)]
    stale_new = [i for i in range(20) if mode("%s/n%d/f" % (M, i)) != (4, 0o600)
                 or os.stat("%s/n%d" % (M, i)).st_mode & 0o777 != 0o700
                 or os.stat("%s/n%d/t" % (M, i)).st_mtime != 1000000000]
    if not stale and not stale_new or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print("stale after an own create: %s; in a new directory: %s" % (stale, stale_new))
sys.exit(1 if stale or stale_new else 0)
PY
	echo "# $output" >&3
	assert_status 0
	assert_content "$MNT/c7" $'pod\n'
}

@test "R1: an idle mount takes in the POD's changes while no request of its own runs" {
	agentd_unix
	# gRPC reads a connection only while some thread polls it. wsfs's
	# watch stream waits without polling, each request polls for itself,
	# and an idle poller does while none runs (fusefs/client.c
	# "Polling"). gRPC's own backup poller would hide a broken one: off.
	# Each test runs in a subshell of its own: the export ends with it.
	# shellcheck disable=SC2030,SC2031
	export GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=0
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	unset GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	# A missing name the watch vouches for: the kernel keeps the negative
	# entry for watch_timeout and answers it without asking wsfs.
	run stat "$MNT/late"
	assert_status 1
	printf 'x\n' >"$ROOT/late"
	sleep 1
	# One look, no retries: the invalidation came while nothing asked.
	assert_content "$MNT/late" $'x\n'
	# Attributes the kernel keeps for watch_timeout, asked once.
	printf 'longer\n' >"$ROOT/late"
	sleep 1
	assert_eq "$(stat -c %s "$MNT/late")" 7
}

@test "R1: with another gRPC poll engine in the environment, an idle mount still takes in the POD's changes" {
	agentd_unix
	# The idle poller needs epoll1; under another engine its own queue
	# polls nothing, so wsfs leaves it off and the watch stream polls for
	# itself. The backup poller is off, as in the case above.
	# Each test runs in a subshell of its own: the export ends with it.
	# shellcheck disable=SC2030,SC2031
	export GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=0 GRPC_POLL_STRATEGY=poll
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	unset GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS GRPC_POLL_STRATEGY
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	run stat "$MNT/late"
	assert_status 1
	printf 'x\n' >"$ROOT/late"
	sleep 1
	assert_content "$MNT/late" $'x\n'
}

nlink_is() {
	[ "$(stat -c %h "$1")" = "$2" ]
}

@test "R2: an open file the POD renamed (over a known name, or a directory above it) still shows the pod's changes" {
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	mkdir "$ROOT/d"
	printf 'AAAA\n' >"$ROOT/a"
	printf 'B\n' >"$ROOT/b"
	printf 'S\n' >"$ROOT/d/s"
	printf '1\n' >"$ROOT/probe"
	visible "the pod's files" content_is "$MNT/probe" $'1\n'
	run python3 - "$MNT" "$ROOT" <<'PY'
import os, sys, time
mnt, pod = sys.argv[1], sys.argv[2]
def sync(v):  # events come in order: once the probe shows, the rest did
    with open(pod + "/probe", "w") as f:
        f.write(v)
    t = time.time()
    while time.time() - t < 5:
        try:
            if open(mnt + "/probe").read() == v:
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise SystemExit("probe not seen")
os.stat(mnt + "/a")                    # the mount knows a (file A)
b = os.open(mnt + "/b", os.O_RDONLY)   # and b (file F), open
s = os.open(mnt + "/d/s", os.O_RDONLY)
os.rename(pod + "/b", pod + "/a")      # the pod: F over a
os.rename(pod + "/d", pod + "/d2")     # the pod: a directory above s
sync("2")
os.fstat(b)
os.fstat(s)                            # the kernel caches both again
with open(pod + "/a", "a") as w:
    w.write("more\n")
with open(pod + "/d2/s", "a") as w:
    w.write("more\n")
sync("3")
t = time.time()
while time.time() - t < 2:             # watch_timeout is 10 s
    got = (os.fstat(b).st_size, os.fstat(s).st_size, os.pread(b, 100, 0))
    if got == (7, 7, b"B\nmore\n"):
        break
    time.sleep(0.02)
print(*got)
PY
	assert_status 0
	assert_eq "$output" "7 7 b'B\\nmore\\n'" "fstat and read of the renamed files' descriptors"
}

@test "R2: a stat after a read costs no call (the read brings the attributes, atime too); the pod's change still shows" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local f i n0 n1 old=978307200 # 2001-01-01: before the mtime, so a read sets atime (relatime)
	for i in 1 2 3 4 5 6; do
		printf 'file %s\n' "$i" >"$ROOT/f$i"
	done
	head -c 3000000 /dev/urandom >"$ROOT/big" # past Open's first bytes: Read calls
	touch -a -d "@$old" "$ROOT"/f? "$ROOT/big"
	# Events come in order: once this shows, the ones before it are done.
	printf 'mark\n' >"$ROOT/probe"
	visible "the pod's files" content_is "$MNT/probe" $'mark\n'
	ls -l "$MNT" >/dev/null # names and attributes known: no lookup calls
	n0=$(calls_settled Stat)
	for f in f1 f2 f3 f4 f5 f6 big; do
		cat "$MNT/$f" >/dev/null
		# The kernel drops its cached atime after a read and asks.
		assert_eq "$(stat -c '%x|%y|%z|%s|%h|%i' "$MNT/$f")" \
			"$(stat -c '%x|%y|%z|%s|%h|%i' "$ROOT/$f")" "$f after a read"
	done
	n1=$(calls Stat)
	assert_eq "$((n1 - n0))" 0 "Stat calls for 7 reads, each with a stat after it"
	if ! wsb_runsc; then
		# The reads set atime in the pod, and the mount said so.
		[ "$(stat -c %X "$MNT/f1")" != "$old" ]
		[ "$(stat -c %X "$MNT/big")" != "$old" ]
	fi
	# What the reads reported gives way to the pod's changes.
	printf 'more\n' >>"$ROOT/f1"
	visible "the pod appended to a read file" size_is "$MNT/f1" 12
	ln "$ROOT/f2" "$ROOT/f2-link"
	visible "the pod linked a read file" nlink_is "$MNT/f2" 2
	chmod 600 "$ROOT/f3"
	visible "the pod chmod'ed a read file" mode_is "$MNT/f3" 600
	ln "$ROOT/f5" "$ROOT/f5-link"
	rm "$ROOT/f5"
	visible "the pod linked and unlinked a read file" nlink_is "$MNT/f5-link" 1
	# The pod renames a read file (or a directory above it), then changes
	# it under the new name: an open descriptor's fstat shows the change.
	mkdir "$ROOT/d"
	printf 'hello\n' >"$ROOT/d/r"
	printf 'hello\n' >"$ROOT/d/s"
	visible "the pod's d" content_is "$MNT/d/s" $'hello\n'
	run python3 - "$MNT" "$ROOT" <<'PY'
import os, sys, time
mnt, pod = sys.argv[1], sys.argv[2]
r = os.open(mnt + "/d/r", os.O_RDONLY)
s = os.open(mnt + "/d/s", os.O_RDONLY)
os.read(r, 100)
os.read(s, 100)
os.rename(pod + "/d/r", pod + "/d/r2")  # the file
os.lseek(r, 0, 0)
os.read(r, 100)
with open(pod + "/d/r2", "a") as w:
    w.write("more data\n")
os.rename(pod + "/d", pod + "/d2")      # a directory above it
with open(pod + "/d2/s", "a") as w:
    w.write("more data\n")
deadline = time.time() + 2
while time.time() < deadline:
    got = (os.fstat(r).st_size, os.fstat(s).st_size)
    if got == (16, 16):
        break
    time.sleep(0.01)
print(*got)
PY
	assert_status 0
	assert_eq "$output" "16 16" "fstat of descriptors whose files the pod renamed and appended to"
	# The mount's own link and unlink (git's objects): the unlink brings
	# what it left (nlink, ctime), and the stat after it costs no call.
	ln "$MNT/f4" "$MNT/f4-obj"
	rm "$MNT/f4"
	n0=$(calls_settled Stat)
	assert_eq "$(stat -c '%z|%h|%i|%s' "$MNT/f4-obj")" "$(stat -c '%z|%h|%i|%s' "$ROOT/f4-obj")" \
		"f4-obj after link and unlink"
	n1=$(calls Stat)
	assert_eq "$((n1 - n0))" 0 "Stat calls for a stat after an own link and unlink"
	# An own change of the file, and its xattrs, are never answered from a read's report.
	cat "$MNT/f6" >/dev/null
	printf 'x' >>"$MNT/f6"
	assert_eq "$(stat -c '%y|%z|%s' "$MNT/f6")" "$(stat -c '%y|%z|%s' "$ROOT/f6")" "f6 after an own append"
	cat "$MNT/f6" >/dev/null
	python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.k", b"v")' "$MNT/f6"
	assert_eq "$(stat -c '%z' "$MNT/f6")" "$(stat -c '%z' "$ROOT/f6")" "f6 after an own setxattr"
	show_latencies
}

@test "R2: stat after the mount's own write or chmod matches the pod: after a read (atime), on a directory listed, on a file linked outside" {
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local f
	# A read in the pod sets atime (relatime: atime <= mtime): stat shows it.
	printf 'one\n' >"$MNT/r"
	touch -a -d 2001-01-01 "$MNT/r"
	cat "$MNT/r" >/dev/null
	assert_eq "$(stat -c '%X %Y %s' "$MNT/r")" "$(stat -c '%X %Y %s' "$ROOT/r")"
	# The same for a directory listed after its own chmod and touch.
	mkdir "$MNT/d"
	touch "$MNT/d/f"
	chmod 755 "$MNT/d"
	touch -a -d 2001-01-01 "$MNT/d"
	ls "$MNT/d" >/dev/null
	assert_eq "$(stat -c '%X %a' "$MNT/d")" "$(stat -c '%X %a' "$ROOT/d")"
	# A second name outside the workspace: inotify sees no change made
	# through it, so the mount's attributes of such a file last only
	# attr_timeout (1 s), own write or not.
	printf 'a\n' >"$MNT/h"
	ln "$ROOT/h" "$BATS_TEST_TMPDIR/out_h"
	printf 'b\n' >>"$MNT/h"
	printf 'pod append\n' >>"$BATS_TEST_TMPDIR/out_h"
	poll_until 3 size_is "$MNT/h" 15 ||
		{ echo "# appended through a name outside: not seen after 3 s" >&3; return 1; }
	for f in r h; do
		assert_eq "$(stat -c '%s %Y %a %h' "$MNT/$f")" "$(stat -c '%s %Y %a %h' "$ROOT/$f")"
	done
	# The same through a descriptor held open since the write, linked and
	# appended outside later: fstat shows it within attr_timeout or so.
	run "$PY" - "$MNT/h2" "$ROOT/h2" "$BATS_TEST_TMPDIR/out_h2" <<'PY'
import os, sys, time
mnt, pod, out = sys.argv[1:]
fd = os.open(mnt, os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"a\n")
os.fstat(fd)
time.sleep(1.5)
os.link(pod, out)
with open(out, "ab") as f:
    f.write(b"pod append\n")
t0 = time.time()
while os.fstat(fd).st_size != 13 and time.time() - t0 < 4:
    time.sleep(0.05)
st = os.fstat(fd)
print(st.st_size, st.st_nlink, round(time.time() - t0, 1) <= 3)
PY
	assert_status 0
	assert_eq "$output" "13 2 True"
}

@test "a call stuck in the kernel (a hung mount inside the workspace) does not hold up agentd's other calls, exec or health" {
	# agentd B's workspace, mounted by wsfs inside agentd A's root.
	mkdir -p "$BATS_TEST_TMPDIR/broot" "$ROOT/inner"
	echo b >"$BATS_TEST_TMPDIR/broot/x"
	echo a >"$ROOT/a"
	agentd_start --root "$BATS_TEST_TMPDIR/broot" --listen "unix:$BATS_TEST_TMPDIR/b.sock"
	MNT="$ROOT/inner" wsfs_start -f "unix:$BATS_TEST_TMPDIR/b.sock"
	local inner=$WSFS_PID i
	agentd_unix
	run timeout 5 "$WSCTL" -a "$ADDR" cat inner/x
	assert_status 0
	assert_eq "$output" b
	# Stop the inner mount's daemon: A's calls into it hang in the kernel,
	# each holding one of A's threads.
	kill -STOP "$inner"
	for i in 1 2; do
		bg "stuck$i" "$WSCTL" -a "$ADDR" stat inner/y$i
	done
	sleep 0.5
	run timeout 5 "$WSCTL" -a "$ADDR" health
	assert_status 0
	run timeout 5 "$WSCTL" -a "$ADDR" cat a
	assert_status 0
	assert_eq "$output" a
	run timeout 5 "$WSCTL" -a "$ADDR" exec -- echo hi
	assert_status 0
	assert_eq "$output" hi
	kill -CONT "$inner"
}

@test "R1: listings prefetched with a parent's never hide the mount's own or the pod's later changes" {
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	mkdir -p "$ROOT/t/x" "$ROOT/t/p/q" "$ROOT/t/d" "$ROOT/t/a/b"
	touch "$ROOT/t/x/h" "$ROOT/t/x/y" "$ROOT/t/a/b/f0"
	printf 'one\n' >"$ROOT/t/d/f"
	visible "tree made in the pod" content_is "$MNT/t/d/f" $'one\n'
	# Listing t prefetches x, p, p/q, d, a, a/b.
	ls "$MNT/t" >/dev/null
	# Own changes after the prefetch.
	mv "$MNT/t/x" "$MNT/t/z"
	mkdir "$MNT/t/x"
	listing_is "$MNT/t/x"
	mkdir "$MNT/t/p/q/sub"
	listing_is "$MNT/t/p/q" sub
	printf 'twotwotwo\n' >>"$MNT/t/d/f"
	# find lists d and takes f's size from the listing (READDIRPLUS).
	assert_eq "$(find "$MNT/t/d" -name f -printf '%s')" 14 "size after an append"
	assert_content "$MNT/t/d/f" $'one\ntwotwotwo\n'
	# A pod change two levels below anything the mount has a node for.
	ls "$MNT/t" >/dev/null
	touch "$ROOT/t/a/b/new"
	visible "created under a prefetched directory" listing_is "$MNT/t/a/b" f0 new
	[ -e "$MNT/t/a/b/new" ]
}

@test "R1: an open of a name the POD replaced after the mount looked it up opens the new file on its own inode: st_ino, size, MAP_SHARED mmap; a hard link's other name, O_TRUNC" {
	agentd_unix
	# No watch and long timeouts: the kernel keeps each name bound to the
	# old file, as it does for the moment before a pod's change reaches it.
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,no_watch,entry_timeout=60,attr_timeout=60"
	printf old >"$ROOT/x"
	printf gone >"$ROOT/g"
	assert_content "$MNT/x" old
	assert_content "$MNT/g" gone
	# Three in a row from one thread (the first open's retry must not
	# make the next one take the old inode), after an open of a name the
	# pod removed (ENOENT). Each replaced file keeps a name in the pod, so
	# that no inode number is used again.
	run "$PY" - "$MNT" "$ROOT" <<-'EOF'
	import mmap, os, sys
	mnt, root = sys.argv[1:3]
	os.unlink(root + "/g")
	try:
	    os.open(mnt + "/g", os.O_RDONLY)
	except FileNotFoundError:
	    pass
	inos = []
	for i in range(3):
	    os.link(root + "/x", root + "/was%d" % i)
	    with open(root + "/x.new", "w") as f:
	        f.write("new%d" % i)
	    os.rename(root + "/x.new", root + "/x")
	    fd = os.open(mnt + "/x", os.O_RDONLY)
	    st = os.fstat(fd)
	    try:
	        m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
	        data = m[:].decode()
	        m.close()
	    except OSError as e:
	        data = "mmap: " + os.strerror(e.errno)
	    os.close(fd)
	    inos.append(st.st_ino)
	    print(st.st_size, data)
	print("distinct inodes:", len(set(inos)) == 3, inos[-1])
	EOF
	assert_status 0
	# The inode number agentd sees (gVisor's gofer numbers its own).
	local ino
	ino=$("$WSCTL" -a "$ADDR" stat x | sed -n 's/^ *Inode: //p')
	[ -n "$ino" ]
	assert_eq "$output" "4 new0
4 new1
4 new2
distinct inodes: True $ino"
	# O_TRUNC truncates the file the name holds now, once.
	printf 'pod text' >"$ROOT/x.new"
	mv "$ROOT/x.new" "$ROOT/x"
	printf t >"$MNT/x"
	assert_content "$ROOT/x" t
	# A hard link: the mount's rename over one name leaves the file its
	# other name; when the pod replaces that one, it opens the new file.
	printf old >"$ROOT/a"
	ln "$ROOT/a" "$ROOT/b"
	assert_content "$MNT/a" old
	assert_content "$MNT/b" old
	printf z >"$MNT/z"
	mv "$MNT/z" "$MNT/a"
	printf newb >"$ROOT/b.new"
	mv "$ROOT/b.new" "$ROOT/b"
	assert_content "$MNT/b" newb
	assert_eq "$(stat -c %s "$MNT/b")" 4 "size of b"
}

@test "R1: the pin a repeated open of a name the POD replaced left in agentd is let go on an idle mount within seconds" {
	if wsb_runsc; then
		skip "agentd's descriptors are in gVisor's sandbox"
	fi
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,no_watch,entry_timeout=60,attr_timeout=60"
	mkdir "$ROOT/pin"
	printf old >"$ROOT/pin/x"
	assert_content "$MNT/pin/x" old
	# The old file keeps a name: its inode number is not used again.
	ln "$ROOT/pin/x" "$ROOT/pin/was"
	printf new >"$ROOT/pin/x.new"
	mv "$ROOT/pin/x.new" "$ROOT/pin/x"
	# The kernel opens its old node, wsfs says ESTALE, the VFS's repeat
	# looks x up again and agentd pins what it finds (ws_lookup()).
	assert_content "$MNT/pin/x" new
	local n
	n=$(open_under "$AGENTD_PID" "$ROOT/pin")
	[ "$n" -ge 1 ]
	# Nothing happens on the mount from here: no close or FORGET lets go of
	# the pin, only the gathering thread once it is 2 s old (gb_main(),
	# node_pins_due()). Before, agentd held new x until the next close.
	if ! poll_until 6 none_open_under "$AGENTD_PID" "$ROOT/pin"; then
		ls -l /proc/"$AGENTD_PID"/fd >&3
		false
	fi
	echo "# agentd let go of the pin after ${POLL_MS} ms" >&3
	assert_content "$MNT/pin/x" new
}

@test "R1: an open, O_CREAT too, of a name the POD made a directory or a FIFO after the mount looked it up acts on the new file (EISDIR, or the FIFO opens), not EIO" {
	agentd_unix
	# No watch and long timeouts: the kernel keeps each name bound to the
	# old regular file; its OPEN finds another type, wsfs says ESTALE, and
	# the VFS looks the name up again.
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,no_watch,entry_timeout=60,attr_timeout=60"
	printf a >"$ROOT/d"
	printf b >"$ROOT/p"
	assert_content "$MNT/d" a
	assert_content "$MNT/p" b
	rm "$ROOT/d" "$ROOT/p"
	mkdir "$ROOT/d"
	run pyerr 'os.close(os.open(sys.argv[2], os.O_RDONLY))' "$MNT/d"
	assert_eq "$output" OK "open(2) O_RDONLY of what is now a directory"
	run pyerr 'open(sys.argv[2]).read()' "$MNT/d"
	assert_eq "$output" EISDIR "read of what is now a directory"
	[ -d "$MNT/d" ]
	# An O_CREAT open of a name a stat found missing, where the pod then
	# made a directory (or, below, a FIFO): EISDIR, or the FIFO opens, as
	# on a local disk. (fs-hostile makes the kernel send the CREATE.)
	run pyerr 'os.stat(sys.argv[2])' "$MNT/cd"
	assert_eq "$output" ENOENT "cd before the pod makes it"
	mkdir "$ROOT/cd"
	run pyerr 'os.close(os.open(sys.argv[2], os.O_RDONLY | os.O_CREAT, 0o644))' "$MNT/cd"
	assert_eq "$output" EISDIR "O_CREAT open of what is now a directory"
	# gVisor's gofer opens no FIFO the host makes in the sandbox (EPERM).
	if ! wsb_runsc; then
		# A writer's blocking open of what is now a FIFO waits for a
		# reader, as on a local disk (agentd's own open of it, never
		# blocking, fails ENXIO: the name is looked up again).
		printf w >"$ROOT/w"
		assert_content "$MNT/w" w
		rm "$ROOT/w"
		mkfifo "$ROOT/w"
		bg fifo_writer sh -c 'echo through >"$1"' sh "$MNT/w"
		sleep 0.5
		assert_eq "$(timeout 10 cat "$MNT/w")" through "a FIFO's reader gets its writer's line"
		mkfifo "$ROOT/p"
		run pyerr 'os.close(os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK))' "$MNT/p"
		assert_eq "$output" OK "O_NONBLOCK open of what is now a FIFO"
		[ -p "$MNT/p" ]
		run pyerr 'os.stat(sys.argv[2])' "$MNT/cp"
		assert_eq "$output" ENOENT "cp before the pod makes it"
		mkfifo "$ROOT/cp"
		run pyerr 'os.close(os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK | os.O_CREAT, 0o644))' \
			"$MNT/cp"
		assert_eq "$output" OK "O_CREAT open of what is now a FIFO"
		[ -p "$MNT/cp" ]
		[ -p "$ROOT/cp" ]
	fi
}

@test "R1: a file the POD rewrites (in place, by rename, append, truncate) shows at once" {
	up
	# Changes made in the pod (pod_run: inside agentd's sandbox under
	# gVisor, whose inotify sees only those): what the mount kept of the
	# file (its pages, the attributes its reads reported) gives way.
	printf 'AAAA\n' >"$MNT/f"
	assert_content "$MNT/f" $'AAAA\n'
	# Same size, same inode: only mtime and data change.
	pod_run sh -c 'printf "BBBB\n" >"$1"' _ "$ROOT/f"
	visible "in place, same size" content_is "$MNT/f" $'BBBB\n'
	cat "$MNT/f" >/dev/null
	# An editor's save: write a temp file, rename it over (new inode).
	pod_run sh -c 'printf "CCCCCC\n" >"$1/.f.tmp" && mv "$1/.f.tmp" "$1/f"' _ "$ROOT"
	visible "rename over" content_is "$MNT/f" $'CCCCCC\n'
	cat "$MNT/f" >/dev/null
	pod_run sh -c 'echo more >>"$1"' _ "$ROOT/f"
	visible "append" content_is "$MNT/f" $'CCCCCC\nmore\n'
	visible "append: size" size_is "$MNT/f" 12
	cat "$MNT/f" >/dev/null
	pod_run truncate -s 3 "$ROOT/f"
	visible "truncate" content_is "$MNT/f" "CCC"
	# A big file rewritten in the middle.
	pod_run sh -c 'head -c 3000000 /dev/zero >"$1"' _ "$ROOT/big"
	cmp -s "$MNT/big" "$ROOT/big"
	pod_run sh -c 'printf XYZ | dd of="$1" bs=1 seek=2000000 conv=notrunc status=none' _ "$ROOT/big"
	visible "3 MB file, 3 bytes changed" cmp -s "$MNT/big" "$ROOT/big"
	show_latencies
}

@test "R1: rm -rf on MNT of a tree the POD removes at the same moment succeeds, as two rm -rf of one local tree do" {
	# The pod's removal of tt came before its event: lstat(2) of tt on
	# the mount said ENOENT while the kernel's dentry still held the
	# directory, and rm's unlink(2) of it failed EISDIR ("cannot remove
	# 'tt': Is a directory"): 4 of 40 rounds before, none since.
	up
	local i fails=0 t="$BATS_TEST_TMPDIR/tree"
	mkdir -p "$t/a/b" "$t/c"
	for i in $(seq 1 30); do echo "$i" >"$t/a/f$i"; echo "$i" >"$t/a/b/g$i"; echo "$i" >"$t/c/h$i"; done
	for i in $(seq 1 30); do
		cp -r "$t" "$MNT/tt"
		sleep 0.2
		rm -rf "$ROOT/tt" &
		rm -rf "$MNT/tt" 2>>"$BATS_TEST_TMPDIR/err" || fails=$((fails + 1))
		wait "$!"
	done
	assert_eq "$fails $(cat "$BATS_TEST_TMPDIR/err")" "0 "
	[ ! -e "$MNT/tt" ] && [ ! -e "$ROOT/tt" ]
}

@test "R1: POD deletes, renames, mkdir/rmdir, chmod and touch show at once" {
	up
	mkdir "$MNT/d"
	echo a >"$MNT/d/a"
	echo b >"$MNT/d/b"
	ls -lA "$MNT/d" >/dev/null
	cat "$MNT/d/a" "$MNT/d/b" >/dev/null
	rm "$ROOT/d/a"
	visible "unlink" absent "$MNT/d/a"
	visible "unlink: listing" listing_is "$MNT/d" b
	mv "$ROOT/d/b" "$ROOT/d/c"
	visible "rename: new name" content_is "$MNT/d/c" $'b\n'
	visible "rename: old name gone" absent "$MNT/d/b"
	chmod 600 "$ROOT/d/c"
	visible "chmod" mode_is "$MNT/d/c" 600
	touch -d '2020-01-02 03:04:05.5' "$ROOT/d/c"
	visible "touch -d" mtime_is "$MNT/d/c" "$(stat -c %.9Y "$ROOT/d/c")"
	# Children removed on the pod side: the mount lists the directory as
	# empty and can remove it.
	mkdir "$ROOT/d/sub"
	touch "$ROOT/d/sub/"{1,2,3}
	visible "new dir listed" listing_is "$MNT/d/sub" 1 2 3
	rm "$ROOT/d/sub/"*
	visible "emptied dir" listing_is "$MNT/d/sub"
	run rmdir "$MNT/d/sub"
	assert_status 0
	rm -r "$ROOT/d"
	visible "rm -r" absent "$MNT/d"
	visible "rm -r: listing" listing_is "$MNT"
	show_latencies
}

@test "R1: files created and rewritten by a command run through wsctl exec show at once" {
	up
	printf 'old\n' >"$MNT/f"
	cat "$MNT/f" >/dev/null
	ls -A "$MNT" >/dev/null
	run "$WSCTL" exec -- sh -c 'printf "from exec\n" > e.txt; printf "new\n" > f; mkdir -p out; echo built > out/a.o'
	assert_status 0
	visible "exec: created" content_is "$MNT/e.txt" $'from exec\n'
	visible "exec: rewritten" content_is "$MNT/f" $'new\n'
	visible "exec: in a new dir" content_is "$MNT/out/a.o" $'built\n'
	# A build that rewrites its output repeatedly.
	local i
	for i in 1 2 3 4 5; do
		run "$WSCTL" exec -- sh -c "echo round $i > out/a.o"
		assert_status 0
		visible "exec: round $i" content_is "$MNT/out/a.o" "round $i"$'\n'
	done
	run "$WSCTL" exec -- rm -rf out
	assert_status 0
	visible "exec: rm -rf" absent "$MNT/out"
	show_latencies
}

@test "R1: files written by Dev_Agent CreateFiles show at once" {
	up
	mkdir "$MNT/app"
	printf 'v0\n' >"$MNT/app/main.py"
	cat "$MNT/app/main.py" >/dev/null
	ls -A "$MNT/app" >/dev/null
	run "$PY" - "$ADDR" <<-'EOF'
	import sys
	import wsbtest
	from wsbtest import devagent_pb2 as d, devagent_pb2_grpc as dg
	stub = dg.ManageAgentOpsStub(wsbtest.channel(sys.argv[1]))
	r = stub.CreateFiles(d.CreateFileRequest(
	    files=["main.py", "pkg/util.py"], contents=["v1\n", "def f():\n    pass\n"],
	    app_name="app"), timeout=15)
	print(r.status)
	EOF
	assert_status 0
	assert_eq "$output" success
	visible "CreateFiles: rewritten" content_is "$MNT/app/main.py" $'v1\n'
	visible "CreateFiles: created" content_is "$MNT/app/pkg/util.py" $'def f():\n    pass\n'
	visible "CreateFiles: listed" listing_is "$MNT/app" main.py pkg
	show_latencies
}

@test "R2: after echo x >> MNT/f, MNT and POD both show the new size and mtime at once" {
	up
	printf 'abc\n' >"$MNT/f"
	touch -d '2020-01-01 00:00:00' "$MNT/f"
	local old t0
	old=$(stat -c %.9Y "$MNT/f")
	assert_eq "$(stat -c %.9Y "$ROOT/f")" "$old" "POD mtime before"
	t0=$(date +%s)
	echo x >>"$MNT/f"
	assert_eq "$(stat -c %s "$MNT/f")" 6 "MNT size"
	assert_eq "$(stat -c %s "$ROOT/f")" 6 "POD size"
	[ "$(stat -c %Y "$MNT/f")" -ge $((t0 - 1)) ]
	[ "$(stat -c %Y "$ROOT/f")" -ge $((t0 - 1)) ]
	assert_eq "$(stat -c %.9Y "$MNT/f")" "$(stat -c %.9Y "$ROOT/f")" "MNT and POD mtime"
	# Twice more, quickly: every append moves size and mtime on both sides.
	local m1 m2
	m1=$(stat -c %.9Y "$MNT/f")
	sleep 0.05
	echo y >>"$MNT/f"
	m2=$(stat -c %.9Y "$MNT/f")
	assert_eq "$(stat -c %s "$MNT/f")" 8 "MNT size"
	assert_eq "$(stat -c %s "$ROOT/f")" 8 "POD size"
	[ "$m2" != "$m1" ]
	assert_eq "$(stat -c %.9Y "$ROOT/f")" "$m2" "POD mtime"

	# make sees a change made on the mount and one made on the pod.
	command -v make >/dev/null || return 0
	printf 'out: in\n\tcp in out\n' >"$MNT/Makefile"
	echo 1 >"$MNT/in"
	touch -d '2020-01-01' "$MNT/in"
	run make -C "$MNT" -s
	assert_status 0
	echo 2 >"$MNT/in"
	run make -C "$MNT" -s
	assert_status 0
	assert_content "$MNT/out" $'2\n' "make after a change on MNT"
	sleep 0.05
	echo 3 >"$ROOT/in"
	visible "pod-side edit: mtime" mtime_is "$MNT/in" "$(stat -c %.9Y "$ROOT/in")"
	run make -C "$MNT" -s
	assert_status 0
	assert_content "$MNT/out" $'3\n' "make after a change on POD"
}

@test "names with spaces, newlines and non-UTF-8 bytes are byte-exact both ways" {
	up
	run "$PY" - "$MNT" "$ROOT" <<-'EOF'
	import errno, os, sys
	mnt, root = (os.fsencode(a) for a in sys.argv[1:3])
	names = [b"a b", b"new\nline", b"\xff\xfe", b"caf\xc3\xa9", b"cafe\xcc\x81",
	         b"tab\t", b" lead", b"trail ", b"\x01\x7f", b"L" * 255, b"q'\"$(x)`",
	         b"back\\slash", b"*", b"-n", b"CaSe", b"case", b".hidden"]
	bad = []
	os.mkdir(os.path.join(mnt, b"m"))
	os.mkdir(os.path.join(root, b"p"))
	for i, n in enumerate(names):
	    with open(os.path.join(mnt, b"m", n), "wb") as f:
	        f.write(b"%d\n" % i)
	    with open(os.path.join(root, b"p", n), "wb") as f:
	        f.write(b"p%d\n" % i)
	for side, d, other, prefix in ((b"m", mnt, root, b""), (b"p", root, mnt, b"p")):
	    got = sorted(os.listdir(os.path.join(other, side)))
	    if got != sorted(names):
	        bad.append("listing of %r seen from the other side: %r" % (side, got))
	    for i, n in enumerate(names):
	        try:
	            with open(os.path.join(other, side, n), "rb") as f:
	                data = f.read()
	        except OSError as e:
	            bad.append("open %r/%r: %s" % (side, n, e))
	            continue
	        if data != prefix + b"%d\n" % i:
	            bad.append("%r/%r holds %r" % (side, n, data))
	    names_via_scandir = sorted(e.name for e in os.scandir(os.path.join(other, side)))
	    if names_via_scandir != sorted(names):
	        bad.append("scandir of %r differs" % side)
	try:
	    open(os.path.join(mnt, b"m", b"L" * 256), "wb")
	    bad.append("256-byte name accepted")
	except OSError as e:
	    if e.errno != errno.ENAMETOOLONG:
	        bad.append("256-byte name: %s" % errno.errorcode[e.errno])
	os.rename(os.path.join(mnt, b"m", b"new\nline"), os.path.join(mnt, b"m", b"\xe9\n\xff"))
	if not os.path.exists(os.path.join(root, b"m", b"\xe9\n\xff")):
	    bad.append("renamed non-UTF-8 name missing on the pod")
	print("\n".join(bad) if bad else "ok")
	EOF
	assert_status 0
	assert_eq "$output" ok
	run bash -c 'ls -A "$1" | sort | uniq -d' _ "$MNT/m"
	assert_eq "$output" "" "names listed twice"
}

@test "R1: with directories past agentd's watch limit, the pod's changes in any of them show within entry_timeout, not watch_timeout" {
	local d
	for d in a b c d e; do
		mkdir "$ROOT/$d"
		printf 'x\n' >"$ROOT/$d/f"
	done
	# The root and one directory are watched; three are not.
	agentd_unix --max-watches 2
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	poll_until 5 grep -q "cannot watch every directory" "$WSFS_ERR"
	# The kernel has each listing, the missing name and f's attributes.
	for d in a b c d e; do
		ls "$MNT/$d" >/dev/null
		[ ! -e "$MNT/$d/new" ]
		assert_eq "$(stat -c %s "$MNT/$d/f")" 2 "$d/f before"
	done
	for d in a b c d e; do
		printf 'new\n' >"$ROOT/$d/new"
		printf 'more\n' >>"$ROOT/$d/f"
	done
	# entry_timeout and attr_timeout are 1 s: 3 s is ample, 60 s (the
	# default watch_timeout) is not.
	for d in a b c d e; do
		if ! poll_until 3 content_is "$MNT/$d/new" $'new\n'; then
			echo "# $d/new: not visible after $POLL_MS ms" >&3
			return 1
		fi
		poll_until 3 size_is "$MNT/$d/f" 7 || { echo "# $d/f: size $(stat -c %s "$MNT/$d/f")" >&3; return 1; }
		grep -qx new <(ls "$MNT/$d")
	done
}

@test "R2: hard links the POD makes in a burst (past a batch's attributes) show nlink 2 on every linked file at once" {
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local i
	mkdir "$ROOT/k" "$ROOT/burst"
	for i in $(seq 40); do printf '%s\n' "$i" >"$ROOT/k/f$i"; done
	printf 'mark\n' >"$ROOT/probe"
	visible "the pod's files" content_is "$MNT/probe" $'mark\n'
	# The kernel and wsfs keep f1..f40 with nlink 1.
	for i in $(seq 40); do cat "$MNT/k/f$i" >/dev/null; done
	assert_eq "$(stat -c %h "$MNT"/k/f* | sort -u)" 1 "nlink before"
	# 1,200 new files with the 40 links among them, made while agentd is
	# stopped so that its batches are big: far past 32 new names each, some
	# past the 1,024 that agentd gives the attributes of.
	kill -STOP "$AGENTD_PID"
	python3 - "$ROOT" <<'PY'
import os, sys
root = sys.argv[1]
for i in range(1200):
    os.close(os.open(f"{root}/burst/n{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    if i % 30 == 29 and i // 30 < 40:
        k = i // 30 + 1
        os.link(f"{root}/k/f{k}", f"{root}/k/l{k}")
PY
	kill -CONT "$AGENTD_PID"
	for i in $(seq 40); do
		visible "nlink of k/f$i" nlink_is "$MNT/k/f$i" 2
	done
	# A link made and moved on before agentd reports it: the CREATED
	# name is gone by then, the MOVED one brings the attributes.
	stat "$MNT/k/f1" >/dev/null
	mkdir "$ROOT/k2"
	touch "$ROOT/k2/p" # once the mount shows it, agentd watches k2
	visible "k2/p" content_is "$MNT/k2/p" ""
	kill -STOP "$AGENTD_PID"
	ln "$ROOT/k/l1" "$ROOT/k/tmp"
	mv "$ROOT/k/tmp" "$ROOT/k2/g"
	kill -CONT "$AGENTD_PID"
	visible "nlink of k/f1 after ln and mv" nlink_is "$MNT/k/f1" 3
}

@test "a symlink's hard links: nlink, owner and times changed through one name show through the other at once; cp -a keeps the link" {
	up
	mkdir "$MNT/lk"
	ln -s target "$MNT/lk/s"
	assert_eq "$(stat -c %h "$MNT/lk/s")" 1 "nlink before ln (now cached)"
	ln "$MNT/lk/s" "$MNT/lk/s2"
	assert_eq "$(stat -c %h "$MNT/lk/s" "$MNT/lk/s2" | tr '\n' ' ')" "2 2 " "nlink of both names after ln"
	ls -l "$MNT/lk" >/dev/null
	touch -h -d 2001-01-01 "$MNT/lk/s"
	assert_eq "$(stat -c %Y "$MNT/lk/s2")" 978307200 "mtime set through the other name"
	chown -h 77 "$MNT/lk/s2"
	assert_eq "$(stat -c %u "$MNT/lk/s")" 77 "owner set through the other name"
	mkdir "$MNT/out"
	(cd "$MNT/lk" && cp -a s s2 "$MNT/out/")
	assert_eq "$(stat -c %i "$MNT/out/s")" "$(stat -c %i "$MNT/out/s2")" "cp -a: one file"
	assert_eq "$(stat -c %h "$ROOT/out/s")" 2 "cp -a: POD nlink"
	rm "$MNT/lk/s2"
	assert_eq "$(stat -c %h "$MNT/lk/s")" 1 "nlink after removing the other name"
	assert_eq "$(readlink "$MNT/lk/s")" target
}

@test "hard links share st_ino and nlink 2; symlinks keep their target" {
	up
	echo data >"$MNT/f"
	run ln "$MNT/f" "$MNT/g"
	assert_status 0
	assert_eq "$(stat -c %i "$MNT/g")" "$(stat -c %i "$MNT/f")" "MNT st_ino of the two names"
	assert_eq "$(stat -c %h "$MNT/f")" 2 "MNT nlink of f"
	assert_eq "$(stat -c %h "$MNT/g")" 2 "MNT nlink of g"
	assert_eq "$(stat -c %i "$ROOT/g")" "$(stat -c %i "$ROOT/f")" "POD st_ino"
	assert_eq "$(stat -c %h "$ROOT/f")" 2 "POD nlink"
	echo more >>"$MNT/g"
	assert_content "$MNT/f" $'data\nmore\n' "f after appending through g"
	assert_eq "$(stat -c %s "$MNT/f")" 10 "size through the other name"
	# ls -i lists both with the same number (readdir, not just stat).
	run bash -c 'ls -i "$1" | awk "{print \$1}" | sort -u | wc -l' _ "$MNT"
	assert_eq "$output" 1 "distinct inode numbers in ls -i"
	rm "$MNT/f"
	assert_eq "$(stat -c %h "$MNT/g")" 1 "nlink after removing one name"
	assert_eq "$(stat -c %h "$ROOT/g")" 1 "POD nlink after removing one name"
	# A hard link made on the pod: the new name shows at once (R1) and, once
	# seen, is the same file as g. (inotify reports only the new name, not
	# g's link count, so g's nlink is only required once h was looked up.)
	stat "$MNT/g" >/dev/null
	ln "$ROOT/g" "$ROOT/h"
	visible "POD hard link: new name" content_is "$MNT/h" $'data\nmore\n'
	assert_eq "$(stat -c %i "$MNT/h")" "$(stat -c %i "$MNT/g")" "st_ino of a POD-made link"
	assert_eq "$(stat -c %h "$MNT/h")" 2 "nlink of the POD-made link"
	assert_eq "$(stat -c %h "$MNT/g")" 2 "nlink of g once h was seen"

	ln -s g "$MNT/s"
	assert_eq "$(readlink "$MNT/s")" g
	assert_eq "$(readlink "$ROOT/s")" g "POD readlink"
	assert_content "$MNT/s" $'data\nmore\n' "read through the symlink"
	ln -s '../some where/x y' "$MNT/s2"
	assert_eq "$(readlink "$MNT/s2")" '../some where/x y'
	assert_eq "$(readlink "$ROOT/s2")" '../some where/x y'
	run ln -s other "$MNT/s"
	assert_status 1
	ln -sfn other "$MNT/s"
	assert_eq "$(readlink "$MNT/s")" other "ln -sfn replaced the link"
	assert_eq "$(stat -c %F "$MNT/s")" "symbolic link"
	mkdir "$MNT/dir"
	echo in >"$MNT/dir/file"
	ln -s dir "$MNT/dl"
	assert_content "$MNT/dl/file" $'in\n' "through a symlinked directory"
	ln -s "$ROOT/g" "$ROOT/pod-abs"
	visible "POD symlink" bash -c '[ "$(readlink "$1")" = "$2" ]' _ "$MNT/pod-abs" "$ROOT/g"
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status is run's global
@test "A1/R1: appends from the mount and from the pod interleave whole" {
	up
	local w n=300 pids=()
	cat >"$BATS_TEST_TMPDIR/app.py" <<-'EOF'
	import os, sys
	path, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
	fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
	for j in range(n):
	    line = b"w%d %04d %s\n" % (wid, j, b"z" * (j % 50))
	    if os.write(fd, line) != len(line):
	        sys.exit("short write")
	os.close(fd)
	EOF
	: >"$MNT/log"
	for w in 0 1 2 3 4 5 6 7; do
		if [ "$w" -lt 4 ]; then
			"$PY" "$BATS_TEST_TMPDIR/app.py" "$MNT/log" "$w" "$n" &
		else
			"$PY" "$BATS_TEST_TMPDIR/app.py" "$ROOT/log" "$w" "$n" &
		fi
		pids+=($!)
	done
	for w in "${pids[@]}"; do
		wait "$w"
	done
	run "$PY" - "$ROOT/log" 8 "$n" <<-'EOF'
	import re, sys
	path, nw, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
	data = open(path, "rb").read()
	lines = data.split(b"\n")
	bad, seen = [], {}
	if lines[-1] != b"":
	    bad.append("no newline at the end")
	for ln in lines[:-1]:
	    m = re.fullmatch(rb"w(\d) (\d{4}) (z*)", ln)
	    if not m or len(m.group(3)) != int(m.group(2)) % 50:
	        bad.append("torn line %r" % ln[:60])
	        continue
	    w, j = int(m.group(1)), int(m.group(2))
	    if j != seen.get(w, -1) + 1:
	        bad.append("writer %d: line %d after %d" % (w, j, seen.get(w, -1)))
	    seen[w] = j
	for w in range(nw):
	    if seen.get(w, -1) != n - 1:
	        bad.append("writer %d: last line %d" % (w, seen.get(w, -1)))
	print("%d lines, %d problems %s" % (len(lines) - 1, len(bad), bad[:5]))
	EOF
	assert_eq "$output" "2400 lines, 0 problems []" "POD log"
	visible "the mount reads the same log" cmp -s "$MNT/log" "$ROOT/log"
	assert_eq "$(stat -c %s "$MNT/log")" "$(stat -c %s "$ROOT/log")" "sizes"
}

@test "A1: an append from the mount that crosses a page boundary is one write in the pod" {
	local before after got kmaj kmin
	IFS=. read -r kmaj kmin _ <<<"$(uname -r)"
	if [ "$kmaj" -lt 6 ] || { [ "$kmaj" -eq 6 ] && [ "${kmin%%[!0-9]*}" -lt 6 ]; }; then
		skip "before Linux 6.6 wsfs appends through the page cache (fusefs/fs.c file_opened)"
	fi
	agentd_unix
	mount_wsfs -d -o "rpc_timeout=$RPC_TIMEOUT" # -d: log every request
	# 4,090 bytes the POD wrote: the mount has no page of the file cached.
	head -c 4090 /dev/zero | tr '\0' a >"$ROOT/log"
	assert_eq "$(stat -c %s "$MNT/log")" 4090 "size before"
	before=$(grep -c 'opcode: WRITE ' "$WSFS_ERR" || true)
	# One write(2) of 15 bytes at 4,090: 6 in the first page, 9 in the next.
	printf '%s' 0123456789abcde >>"$MNT/log"
	after=$(grep -c 'opcode: WRITE ' "$WSFS_ERR" || true)
	assert_eq "$((after - before))" 1 "WRITE requests for one append"
	assert_eq "$(tail -c 16 "$ROOT/log")" a0123456789abcde "POD tail"
	assert_eq "$(tail -c 16 "$MNT/log")" a0123456789abcde "mount tail"
	# A reader with the file's pages cached reads the next append.
	got=$("$PY" - "$MNT/log" <<-'EOF'
	import os, sys
	r = os.open(sys.argv[1], os.O_RDONLY)
	a = os.pread(r, 8192, 0)
	w = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
	os.write(w, b"XYZ")
	b = os.pread(r, 8192, 0)
	print(len(a), len(b), b[-4:].decode())
	EOF
	)
	assert_eq "$got" "4105 4108 eXYZ" "cached reader after an append"
}

@test "chown clears set-user-ID and set-group-ID as on ext4 and keeps the sticky bit and the rest" {
	local d m local_dir="$BATS_TEST_TMPDIR/local" want
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir -p "$local_dir"
	# (2745: set-group-ID without group execute stays.)
	for m in 3777 6755 2755 2745 4700 1777 644; do
		for d in "$MNT" "$local_dir"; do
			touch "$d/c$m"
			chmod "$m" "$d/c$m"
			chown 1000:5 "$d/c$m"
		done
		want=$(stat -c '%a %u %g' "$local_dir/c$m")
		assert_eq "$(stat -c '%a %u %g' "$MNT/c$m")" "$want" "mount after chmod $m; chown"
		assert_eq "$(stat -c '%a %u %g' "$ROOT/c$m")" "$want" "POD after chmod $m; chown"
	done
	assert_eq "$(stat -c %a "$local_dir/c3777")" 1777 "local mode after chmod 3777; chown"
}

@test "chown(f, -1, -1) and fchown(fd, -1, -1) move ctime as on ext4, on the mount and in the pod" {
	# The kernel sends them as a SETATTR that sets nothing: agentd only
	# cleared set-ID bits, and ctime stayed.
	local d local_dir="$BATS_TEST_TMPDIR/local"
	if wsb_runsc; then
		skip "gVisor's own chown(2) to -1, -1 leaves ctime (runsc do: a chown to the same owner moves it)"
	fi
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir -p "$local_dir"
	for d in "$local_dir" "$MNT"; do
		run "$PY" - "$d" <<'PY'
import os, sys, time
d = sys.argv[1]
for name, by_fd in (("n", False), ("fd", True)):
    p = os.path.join(d, name)
    open(p, "w").close()
    os.utime(p, (5, 5))  # an old mtime; ctime now
    c0 = os.stat(p).st_ctime_ns
    time.sleep(0.05)
    if by_fd:
        fd = os.open(p, os.O_RDONLY)
        os.fchown(fd, -1, -1)
        os.close(fd)
    else:
        os.chown(p, -1, -1)
    st = os.stat(p)
    print(name, st.st_ctime_ns > c0, st.st_mtime_ns)
PY
		assert_status 0
		assert_eq "$output" "n True 5000000000
fd True 5000000000" "$d"
	done
	assert_eq "$(stat -c %z "$ROOT/n") $(stat -c %z "$ROOT/fd")" \
		"$(stat -c %z "$MNT/n") $(stat -c %z "$MNT/fd")" "ctime, POD and mount"
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "A1: an append by a writer without CAP_FSETID clears setuid and setgid, as on ext4" {
	local d local_dir="$BATS_TEST_TMPDIR/local"
	command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir -p "$local_dir"
	for d in "$MNT" "$local_dir"; do
		printf 'x\n' >"$d/w"
		chmod 6755 "$d/w"
		# >> opens O_WRONLY|O_APPEND; the kernel clears the bits of a
		# file written by a process without CAP_FSETID.
		setpriv --bounding-set=-fsetid -- sh -c 'printf y >>"$1"' _ "$d/w"
	done
	assert_eq "$(stat -c %a "$local_dir/w")" 755 "local mode after the append"
	assert_eq "$(stat -c %a "$ROOT/w")" 755 "POD mode after the append"
	assert_eq "$(stat -c %a "$MNT/w")" 755 "mount mode after the append"
	assert_eq "$(cat "$ROOT/w")" "$(printf 'x\ny')" "POD contents"
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "A1: writes, truncates, O_TRUNC, fallocate, copy_file_range and chown by a writer without CAP_FSETID clear set-ID bits as on ext4; a new file and a writer with it keep them" {
	local d n local_dir="$BATS_TEST_TMPDIR/local"
	command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	mkdir -p "$local_dir"
	for d in "$MNT" "$local_dir"; do
		for n in small big trunc ftrunc otrunc creat falloc cfr chown chown1 root; do
			printf 'x\n' >"$d/$n"
			chmod 6755 "$d/$n"
		done
		# Set-group-ID without group execute: kept for a writer in the
		# file's group (fs/attr.c setattr_should_drop_sgid).
		printf 'x\n' >"$d/nox"
		chmod 2644 "$d/nox"
		# Small writes are gathered and sent by close, 1 MiB ones sent
		# behind the write: both paths carry the request's flag.
		setpriv --bounding-set=-fsetid -- "$PY" - "$d" <<-'EOF'
		import os, sys
		d = sys.argv[1]
		fd = os.open(d + "/small", os.O_WRONLY)
		for i in range(100):
		    os.pwrite(fd, b"0123456789", 10 * i)
		os.close(fd)
		fd = os.open(d + "/big", os.O_WRONLY)
		for i in range(3):
		    os.write(fd, b"b" * (1 << 20))
		os.close(fd)
		os.truncate(d + "/trunc", 1)
		fd = os.open(d + "/ftrunc", os.O_WRONLY)
		os.ftruncate(fd, 1)
		os.close(fd)
		os.close(os.open(d + "/otrunc", os.O_WRONLY | os.O_TRUNC))
		os.close(os.open(d + "/creat", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
		fd = os.open(d + "/falloc", os.O_WRONLY)
		os.posix_fallocate(fd, 0, 8192)
		os.close(fd)
		src = os.open(d + "/nox", os.O_RDONLY)
		fd = os.open(d + "/cfr", os.O_WRONLY)
		os.copy_file_range(src, fd, 2)
		os.close(fd)
		os.close(src)
		os.chown(d + "/chown", -1, -1)
		os.chown(d + "/chown1", 0, 0)
		# Made now (FUSE_CREATE, flagged as any O_TRUNC create):
		# nothing was truncated, nothing is cleared.
		os.umask(0)
		os.close(os.open(d + "/new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o6755))
		fd = os.open(d + "/nox", os.O_WRONLY | os.O_APPEND)
		os.write(fd, b"y")
		os.close(fd)
		EOF
		printf y >>"$d/root"
	done
	for n in small big trunc ftrunc otrunc creat falloc cfr chown chown1; do
		assert_eq "$(stat -c %a "$local_dir/$n")" 755 "local mode of $n"
	done
	assert_eq "$(stat -c %a "$local_dir/new")" 6755 "local mode of a new file"
	assert_eq "$(stat -c %a "$local_dir/root")" 6755 "local mode after root's append"
	if wsb_runsc; then
		# gVisor clears the bits on agentd's own writes too (as for
		# a writer without CAP_FSETID; set-group-ID without group
		# execute as well): the mount shows the pod's mode.
		for n in nox root; do
			assert_eq "$(stat -c %a "$MNT/$n")" "$(stat -c %a "$ROOT/$n")" "mount mode of $n"
			chmod "$(stat -c %a "$ROOT/$n")" "$local_dir/$n"
		done
	fi
	for n in small big trunc ftrunc otrunc creat falloc cfr chown chown1 new nox root; do
		assert_eq "$(stat -c %a "$MNT/$n")" "$(stat -c %a "$local_dir/$n")" "mount mode of $n"
		assert_eq "$(stat -c %a "$ROOT/$n")" "$(stat -c %a "$local_dir/$n")" "POD mode of $n"
		cmp "$ROOT/$n" "$local_dir/$n"
	done
}

@test "A1: agentd not root: the bits the pod's kernel clears on agentd's write are gone on the mount too" {
	local d
	wsb_runsc && skip "agentd runs as root in the sandbox here"
	up_nobody
	d=$NOBODY_DIR
	printf 'x\n' >"$MNT/s"
	chmod 4755 "$MNT/s"
	stat "$MNT/s" >/dev/null # the kernel holds 4755
	# A writer with CAP_FSETID (root here): the host's kernel keeps the
	# bit, agentd (nobody) has no CAP_FSETID, so the pod's clears it; the
	# event of that is an echo of the mount's own write.
	printf 'y\n' >>"$MNT/s"
	assert_eq "$(stat -c %a "$d/root/s")" 755 "POD mode"
	assert_eq "$(stat -c %a "$MNT/s")" 755 "mount mode"
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "A2: a descriptor writes on after another closed, with no write permission left and agentd not root" {
	local d
	wsb_runsc && skip "agentd runs as root in the sandbox here"
	# The close of a descriptor of a file with an execute bit gives
	# agentd's writable handle back (so that the pod can run the file);
	# a write on another descriptor opens it again, which a mode of no
	# write bits forbids an agentd that is not root: such a handle stays.
	up_nobody
	d=$NOBODY_DIR
	run "$PY" - "$MNT/x" <<-'EOF'
	import os, sys
	fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o555)
	os.write(fd, b"a")
	os.close(os.dup(fd))
	os.write(fd, b"b")
	os.close(fd)
	EOF
	assert_status 0
	assert_eq "$(stat -c '%U %a' "$d/root/x")" "nobody 555" "POD owner and mode"
	assert_eq "$(cat "$d/root/x")" ab "POD contents"
	assert_eq "$(cat "$MNT/x")" ab "mount contents"
}

@test "file systems mounted inside the workspace: their files get inode numbers of their own, so tar keeps their contents and find sees no loop" {
	wsb_runsc && skip "mounts made on the host under the workspace are not the sandbox's"
	agentd_unix
	mkdir -p "$ROOT/mp1" "$ROOT/mp2"
	mount -t tmpfs wsb-nested "$ROOT/mp1" 2>/dev/null || skip "cannot mount a tmpfs here"
	NESTED_MOUNTS="$ROOT/mp1"
	mount -t tmpfs wsb-nested "$ROOT/mp2"
	NESTED_MOUNTS="$ROOT/mp2 $ROOT/mp1"
	# Each tmpfs numbers its files from the same start: f is inode 2 on
	# both, and the roots of mp1 and mp1/in are both 1.
	printf AAAA >"$ROOT/mp1/f"
	ln "$ROOT/mp1/f" "$ROOT/mp1/f2"
	printf BBBBBBBB >"$ROOT/mp2/f"
	ln "$ROOT/mp2/f" "$ROOT/mp2/f2"
	mkdir "$ROOT/mp1/in"
	mount -t tmpfs wsb-nested "$ROOT/mp1/in"
	NESTED_MOUNTS="$ROOT/mp1/in $ROOT/mp2 $ROOT/mp1"
	printf in >"$ROOT/mp1/in/g"
	printf top >"$ROOT/top"
	assert_eq "$(stat -c %i "$ROOT/mp1/f")" "$(stat -c %i "$ROOT/mp2/f")" "the pod's numbers collide"
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	local i1 i2
	i1=$(stat -c %i "$MNT/mp1/f")
	i2=$(stat -c %i "$MNT/mp2/f")
	[ "$i1" != "$i2" ] || { echo "mp1/f and mp2/f share inode $i1 on the mount" >&2; return 1; }
	assert_eq "$(stat -c %i "$MNT/mp1/f2")" "$i1" "hard links share their number"
	[ "$(stat -c %i "$MNT/mp1")" != "$(stat -c %i "$MNT/mp1/in")" ] ||
		{ echo "mp1 and mp1/in share an inode number" >&2; return 1; }
	# The workspace's own file system keeps the pod's numbers.
	assert_eq "$(stat -c %i "$MNT/top")" "$(stat -c %i "$ROOT/top")" "inode of a file on the root's file system"
	tar -cf "$BATS_TEST_TMPDIR/t.tar" -C "$MNT" mp1 mp2
	mkdir "$BATS_TEST_TMPDIR/x"
	tar -xf "$BATS_TEST_TMPDIR/t.tar" -C "$BATS_TEST_TMPDIR/x"
	assert_content "$BATS_TEST_TMPDIR/x/mp1/f" AAAA
	assert_content "$BATS_TEST_TMPDIR/x/mp2/f" BBBBBBBB
	assert_content "$BATS_TEST_TMPDIR/x/mp2/f2" BBBBBBBB
	assert_content "$BATS_TEST_TMPDIR/x/mp1/in/g" in
	run --separate-stderr find "$MNT/mp1" "$MNT/mp2"
	assert_status 0
	assert_eq "$stderr" "" "find's complaints"
	assert_eq "$(printf '%s\n' "$output" | wc -l)" 8 "entries find lists"
	umount_wsfs
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "-o allow_other: another user of the host is checked against the files' mode and owner (default_permissions implied), as on a local disk" {
	local d
	command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
	# Every call reaches agentd as agentd's user (root here): the kernel
	# must check the caller, or nobody would read and change root's files.
	d=$(mktemp -d /tmp/wsb-nobody.XXXXXX)
	NOBODY_DIR=$d
	chmod 755 "$d"
	agentd_unix
	MNT=$d/mnt mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,allow_other"
	grep -q " $d/mnt fuse.wsfs .*default_permissions" /proc/mounts ||
		{ grep " $d/mnt " /proc/mounts >&2; echo "no default_permissions in the mount's options" >&2; return 1; }
	printf secret >"$d/mnt/secret"
	chmod 600 "$d/mnt/secret"
	printf open >"$d/mnt/open"
	mkdir -m 777 "$d/mnt/pub"
	nobody() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups -- "$@"; }
	run nobody cat "$d/mnt/secret"
	assert_status 1
	assert_contains "$output" "Permission denied"
	run nobody sh -c 'printf x >>"$1"' _ "$d/mnt/secret"
	assert_contains "$output" "Permission denied"
	run nobody touch "$d/mnt/newfile"
	assert_status 1
	assert_contains "$output" "Permission denied"
	run nobody rm -f "$d/mnt/secret"
	assert_status 1
	assert_contains "$output" "Permission denied"
	assert_content "$ROOT/secret" secret
	[ ! -e "$ROOT/newfile" ]
	# What the modes allow, nobody may do.
	run nobody cat "$d/mnt/open"
	assert_status 0
	assert_eq "$output" open "a 0644 file, read by another user"
	run nobody sh -c 'printf mine >"$1/pub/n" && cat "$1/pub/n"' _ "$d/mnt"
	assert_status 0
	assert_eq "$output" mine "a file another user made in a 0777 directory"
	assert_content "$ROOT/pub/n" mine
}

# write_synced FILE BYTES-FILE: copy BYTES-FILE into FILE with write + fsync.
write_synced() {
	"$PY" -c 'import os, sys
data = open(sys.argv[2], "rb").read()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
assert os.write(fd, data) == len(data)
os.fsync(fd)
os.close(fd)' "$1" "$2"
}

# C1 checks note every deviation in PROBLEMS and go on, so that one run shows
# all of them; no_problems fails the test at the end if there were any.
PROBLEMS=
problem() {
	PROBLEMS+="$*"$'\n'
	echo "# problem: $*" >&3
}
no_problems() {
	[ -z "$PROBLEMS" ]
}

# bounded_fail WHAT CMD...: CMD fails (not by the 30 s guard) within
# RPC_TIMEOUT + 2 s with EIO or ENOTCONN in its stderr.
bounded_fail() {
	local what=$1 t0 ms bound=$(((RPC_TIMEOUT + 2) * 1000))
	shift
	t0=$(now_ms)
	run --separate-stderr timeout 30 bash -c '"$@" >/dev/null' _ "$@"
	ms=$(($(now_ms) - t0))
	LATENCIES+="$what=${ms}ms "
	# shellcheck disable=SC2031 # status comes from the run above (whole if)
	if [ "$status" -eq 124 ]; then
		problem "$what: still blocked after 30 s (hangs)"
	elif [ "$status" -eq 0 ]; then
		problem "$what: succeeded while agentd was unreachable"
	else
		[ "$ms" -lt "$bound" ] || problem "$what: failed after $ms ms (bound $bound ms)"
		[[ $stderr == *"Input/output error"* || $stderr == *"Transport endpoint is not connected"* ]] ||
			problem "$what: error is not EIO/ENOTCONN: $stderr"
	fi
}

# bounded WHAT CMD...: CMD returns (any status) within RPC_TIMEOUT + 2 s.
bounded() {
	local what=$1 t0 ms bound=$(((RPC_TIMEOUT + 2) * 1000))
	shift
	t0=$(now_ms)
	run timeout 30 "$@"
	ms=$(($(now_ms) - t0))
	# shellcheck disable=SC2031 # status comes from the run above
	LATENCIES+="$what=${ms}ms(exit $status) "
	# shellcheck disable=SC2031 # status comes from the run above (whole if)
	if [ "$status" -eq 124 ] || [ "$ms" -ge "$bound" ]; then
		problem "$what: took $ms ms, exit $status (bound $bound ms)"
	fi
}

# recovers WHAT CMD...: after agentd is back, CMD (a check on MNT) succeeds
# within the same bound, RPC_TIMEOUT + 2 s, without a remount.
recovers() {
	local what=$1
	shift
	if poll_until $((RPC_TIMEOUT + 2)) "$@"; then
		LATENCIES+="$what=${POLL_MS}ms "
	elif poll_until 30 "$@"; then
		problem "$what: works again only $((POLL_MS + (RPC_TIMEOUT + 2) * 1000)) ms after agentd is back (bound $(((RPC_TIMEOUT + 2) * 1000)) ms)"
	else
		problem "$what: still failing 30 s after agentd is back"
	fi
}

# relay_up NAME PATH BYTES_PER_S: tests/python/slowlink.py listening on
# unix:PATH in front of agentd's $SOCK, carrying at most BYTES_PER_S from
# wsfs to agentd (0: no limit), started as `bg NAME` without the test's fds 5 and 6 (files it
# holds open on the mount); its pid: RELAY_PID.
relay_up() {
	bg "$1" "$PY" "$PYTESTS/slowlink.py" "$2" "$SOCK" "$3" 5>&- 6<&-
	RELAY_PID=$BG_PID
	wait_listen "unix:$2" "$RELAY_PID"
}

@test "C1: a name the mount was told is missing, made in the POD while the watch was down, shows once it is back" {
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	mkdir "$ROOT/sub"
	printf '1\n' >"$ROOT/probe"
	visible "the pod's sub" content_is "$MNT/probe" $'1\n'
	# Negative dentries, kept for watch_timeout while the watch vouches.
	run stat "$MNT/foo"
	[ "$status" -ne 0 ]
	run stat "$MNT/sub/foo"
	[ "$status" -ne 0 ]
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	touch "$ROOT/foo" "$ROOT/sub/foo"
	agentd_unix
	# The new stream is live once a change made after it shows.
	poll_until 10 content_is "$MNT/probe" $'1\n'
	printf '2\n' >"$ROOT/probe"
	poll_until 10 content_is "$MNT/probe" $'2\n'
	visible "made while the watch was down" test -e "$MNT/foo"
	visible "made while the watch was down, in a subdirectory" test -e "$MNT/sub/foo"
	show_latencies
}

@test "C1: agentd killed: calls fail fast with EIO/ENOTCONN; restarted on the same address: works again, fsync'ed data intact" {
	up tcp
	head -c 1500000 /dev/urandom >"$BATS_TEST_TMPDIR/data"
	write_synced "$MNT/f" "$BATS_TEST_TMPDIR/data"
	printf 'precious\n' >"$BATS_TEST_TMPDIR/small"
	write_synced "$MNT/g" "$BATS_TEST_TMPDIR/small"
	cmp "$ROOT/f" "$BATS_TEST_TMPDIR/data"
	cmp "$MNT/f" "$BATS_TEST_TMPDIR/data"
	mkdir -p "$MNT/d/sub"
	ls -R "$MNT/d" >/dev/null
	local orig_wsfs=$WSFS_PID

	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	# Directories the kernel knows: a shell moves among them (chdir(2)
	# asked agentd for access and failed ENOTCONN).
	run timeout 30 bash -c 'cd "$1/d/sub" && cd .. && cd sub && test -x . && pwd' _ "$MNT"
	assert_status 0
	assert_eq "$output" "$MNT/d/sub" "cd among known directories while agentd is away"
	bounded_fail "cat" cat "$MNT/f"
	bounded_fail "cat again" cat "$MNT/g"
	bounded_fail "create" bash -c 'echo x > "$1"' _ "$MNT/new"
	bounded "ls" ls "$MNT"
	bounded "stat" stat "$MNT/g"
	bounded "df" df "$MNT"

	agentd_start --root "$ROOT" --listen "$ADDR"
	recovers "after restart: cat" cmp -s "$MNT/f" "$BATS_TEST_TMPDIR/data"
	show_latencies
	# The same mount, the same wsfs, no remount; the data is intact.
	proc_alive "$orig_wsfs"
	is_mounted "$MNT"
	cmp "$MNT/f" "$BATS_TEST_TMPDIR/data"
	assert_content "$MNT/g" $'precious\n'
	cmp "$ROOT/f" "$BATS_TEST_TMPDIR/data"
	assert_content "$ROOT/g" $'precious\n'
	echo after >"$MNT/after"
	assert_content "$ROOT/after" $'after\n'
	run ls "$MNT"
	assert_eq "$output" $'after\nd\nf\ng'
	no_problems
}

@test "C1: tail -f and tail -F of a file the mount appended to go on through an agentd restart (default_permissions): what the POD appends after it shows once" {
	wsb_runsc && skip "restarts agentd outside the sandbox"
	local out=$BATS_TEST_TMPDIR/tail.out outF=$BATS_TEST_TMPDIR/tailF.out tp tpF
	agentd_tcp
	# default_permissions: the kernel checks each directory of a path
	# walk against attributes it asks for (tail -F stats the name).
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,default_permissions"
	mkdir "$ROOT/logs"
	printf 'one\n' >"$ROOT/logs/log"
	echo mount >>"$MNT/logs/log"
	tail -f "$MNT/logs/log" >"$out" 2>"$BATS_TEST_TMPDIR/tail.err" &
	tp=$!
	tail -F "$MNT/logs/log" >"$outF" 2>"$BATS_TEST_TMPDIR/tailF.err" &
	tpF=$!
	# shellcheck disable=SC2030,SC2031 # bats @test is not a subshell; WSB_PIDS is its global
	WSB_PIDS+=("$tp" "$tpF")
	poll_until 5 grep -q mount "$out"
	poll_until 5 grep -q mount "$outF"
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	# tail(1) polls a file on FUSE with fstat(2) each second: several
	# polls, beyond attr_timeout, while agentd is away.
	sleep 3
	agentd_start --root "$ROOT" --listen "$ADDR"
	printf 'two\n' >>"$ROOT/logs/log"
	poll_until $((RPC_TIMEOUT + 5)) grep -q two "$out" ||
		{ cat "$BATS_TEST_TMPDIR/tail.err" >&2; return 1; }
	poll_until $((RPC_TIMEOUT + 5)) grep -q two "$outF" ||
		{ cat "$BATS_TEST_TMPDIR/tailF.err" >&2; return 1; }
	proc_alive "$tp"
	proc_alive "$tpF"
	assert_eq "$(cat "$out")" $'one\nmount\ntwo'
	assert_eq "$(cat "$outF")" $'one\nmount\ntwo'
	kill "$tp" "$tpF"
	wait "$tp" "$tpF" 2>/dev/null || true
}

@test "C1: a program run from the mount and a shared mapping's unsaved writes go on through an agentd restart" {
	wsb_runsc && skip "restarts agentd outside the sandbox"
	command -v cc >/dev/null || skip "no C compiler"
	agentd_tcp
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	# Eight functions on pages of their own, called each tick: a tick
	# after the restart touches pages of the program it did not yet run.
	cat >"$MNT/prog.c" <<'C'
#include <stdio.h>
#include <unistd.h>
#define F(n) __attribute__((noinline, aligned(4096))) int f##n(int x) { return x * n + 1; }
F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8)
int main(void)
{
	for (int t = 0; t < 8; t++) {
		printf("tick %d %d\n", t, f1(t) + f2(t) + f3(t) + f4(t) + f5(t) + f6(t) + f7(t) + f8(t));
		fflush(stdout);
		sleep(1);
	}
	return 0;
}
C
	cc -O1 -o "$MNT/prog" "$MNT/prog.c"
	head -c 8192 /dev/zero | tr '\0' . >"$MNT/mapped"
	sleep 1 # the file's mtime before the mapping's write
	"$MNT/prog" >"$BATS_TEST_TMPDIR/prog.out" 2>&1 &
	local pp=$! st=0
	# shellcheck disable=SC2030,SC2031 # bats @test is not a subshell; WSB_PIDS is its global
	WSB_PIDS+=("$pp")
	"$PY" -c 'import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 8192)
m[0:5] = b"AAAAA"
open(sys.argv[2], "w").close()
while os.path.exists(sys.argv[2]):
    time.sleep(0.05)
print(m[0:5].decode())
m.close()
os.close(fd)' "$MNT/mapped" "$BATS_TEST_TMPDIR/go" >"$BATS_TEST_TMPDIR/map.out" &
	local mp=$!
	WSB_PIDS+=("$mp")
	poll_until 5 test -e "$BATS_TEST_TMPDIR/go"
	poll_until 5 grep -q "tick 1" "$BATS_TEST_TMPDIR/prog.out"
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	# Before: every page was dropped when the watch ended; the program's
	# next tick faulted one in while agentd was away (SIGBUS), and the
	# mapping's dirty page was written back into the outage and lost.
	sleep 1.5
	agentd_start --root "$ROOT" --listen "$ADDR"
	# (A write-back before the mount found agentd back would fail at once,
	# as any call then; Python's mmap.close() drops that error.)
	poll_until 5 cat "$MNT/prog.c" >/dev/null
	rm "$BATS_TEST_TMPDIR/go"
	wait "$pp" || st=$?
	assert_eq "$st" 0 "the program's exit status ($(tail -n 1 "$BATS_TEST_TMPDIR/prog.out"))"
	assert_eq "$(tail -n 1 "$BATS_TEST_TMPDIR/prog.out")" "tick 7 260"
	wait "$mp"
	assert_eq "$(cat "$BATS_TEST_TMPDIR/map.out")" AAAAA "the mapping after the restart"
	assert_eq "$(head -c 5 "$ROOT/mapped")" AAAAA "the file in the POD"
}

@test "C1: agentd back with another token: calls fail EACCES and wsfs says why; back with the mount's: the mount works" {
	wsb_runsc && skip "restarts agentd outside the sandbox"
	printf 'tok-a\n' >"$BATS_TEST_TMPDIR/a"
	printf 'tok-b\n' >"$BATS_TEST_TMPDIR/b"
	chmod 600 "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
	agentd_tcp --token-file "$BATS_TEST_TMPDIR/a"
	mount_wsfs --token-file "$BATS_TEST_TMPDIR/a" -o "rpc_timeout=$RPC_TIMEOUT"
	echo x >"$MNT/f"
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	agentd_start --root "$ROOT" --listen "$ADDR" --token-file "$BATS_TEST_TMPDIR/b"
	# Before: ENOTCONN for good, logged as agentd being unreachable.
	poll_until $((RPC_TIMEOUT + 5)) grep -q "refuses this mount's bearer token" "$WSFS_ERR"
	run pyerr 'os.stat(sys.argv[2] + "/f")' "$MNT"
	assert_eq "$output" EACCES "stat with agentd's token changed"
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	agentd_start --root "$ROOT" --listen "$ADDR" --token-file "$BATS_TEST_TMPDIR/a"
	poll_until $((RPC_TIMEOUT + 5)) cat "$MNT/f"
	assert_content "$MNT/f" $'x\n'
}

@test "C1: a listing read half-way when agentd goes away reads to its end, every name once" {
	wsb_runsc && skip "kills agentd outside the sandbox"
	local fifo=$BATS_TEST_TMPDIR/go rp
	up tcp
	mkdir "$ROOT/big"
	(cd "$ROOT/big" && seq -f "entry-with-a-longish-name-%05g" 1 3000 | xargs touch)
	mkfifo "$fifo"
	# readdir(3) asks the kernel 32 KiB at a time: 100 names come from
	# the first of several READDIRPLUS replies.
	"$PY" - "$MNT/big" "$fifo" >"$BATS_TEST_TMPDIR/names" 2>"$BATS_TEST_TMPDIR/err" <<-'EOF' &
	import os, sys
	it = os.scandir(sys.argv[1])
	names = [next(it).name for _ in range(100)]
	print("half", flush=True, file=sys.stderr)
	open(sys.argv[2]).read()
	names += [e.name for e in it]
	print("\n".join(sorted(names)))
	EOF
	rp=$!
	poll_until 10 grep -q half "$BATS_TEST_TMPDIR/err"
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	# wsfs finds agentd gone (it checks every 250 ms) and drops what the
	# kernel caches of the workspace, the listing's pages too.
	bounded_fail "cat" cat "$MNT/big/entry-with-a-longish-name-00001"
	echo go >"$fifo"
	wait "$rp" || { cat "$BATS_TEST_TMPDIR/err" >&2; return 1; }
	assert_eq "$(wc -l <"$BATS_TEST_TMPDIR/names")" 3000 "names read"
	assert_eq "$(sort -u "$BATS_TEST_TMPDIR/names" | wc -l)" 3000 "names read once"
	agentd_start --root "$ROOT" --listen "$ADDR"
	recovers "after restart: ls" bash -c '[ "$(ls "$1" | wc -l)" = 3000 ]' _ "$MNT/big"
}

# tail_listing OUTAGE: tail -f a file of a directory of 600 names while
# a reader stops part-way through the directory's listing; the POD appends
# to the file, the reader reads the rest (with agentd killed first, when
# OUTAGE is 1), the POD appends again. The follower must print each line
# once: an entry served from the listing with the file's older size made
# the kernel cut its i_size ("file truncated", lines printed twice).
tail_listing() {
	local out=$BATS_TEST_TMPDIR/tail.out tp last rd=$BATS_TEST_TMPDIR/rd i
	up tcp
	mkdir "$ROOT/d"
	for i in $(seq 1 600); do : >"$ROOT/d/f$i"; done
	# The file goes where a listing reaches it only after its first page
	# (offsets are hash order, stable in this mount).
	last=$("$PY" -c 'import os, sys; print([e.name for e in os.scandir(sys.argv[1])][-40])' "$MNT/d")
	mv "$ROOT/d/$last" "$ROOT/d/log"
	printf 'one\n' >"$ROOT/d/log"
	touch "$ROOT/d/newname" # the kernel's cached listing goes
	poll_until 5 test -e "$MNT/d/newname"
	mkfifo "$rd.in"
	cat >"$rd.py" <<-'EOF'
	import ctypes, os, sys
	libc = ctypes.CDLL(None, use_errno=True)
	fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
	buf = ctypes.create_string_buffer(512)
	def one():
	    return libc.syscall(217, fd, buf, 512) # getdents64
	print("first", one(), flush=True)
	sys.stdin.readline()
	while one() > 0:
	    pass
	print("end", flush=True)
	EOF
	"$PY" "$rd.py" "$MNT/d" <"$rd.in" >"$rd.out" 2>&1 3>&- &
	# shellcheck disable=SC2030,SC2031 # bats @test is not a subshell; WSB_PIDS is its global
	WSB_PIDS+=("$!")
	exec 7>"$rd.in"
	poll_until 5 grep -q first "$rd.out"
	tail -f "$MNT/d/log" >"$out" 2>"$BATS_TEST_TMPDIR/tail.err" &
	tp=$!
	# shellcheck disable=SC2030,SC2031 # bats @test is not a subshell; WSB_PIDS is its global
	WSB_PIDS+=("$tp")
	poll_until 5 grep -q one "$out"
	printf 'two\nthree\nfour\n' >>"$ROOT/d/log"
	poll_until 5 grep -q four "$out"
	if [ "$1" = 1 ]; then
		kill -KILL "$AGENTD_PID"
		wait_gone "$AGENTD_PID" 5
		sleep 0.5
	fi
	echo go >&7
	poll_until 10 grep -q end "$rd.out"
	exec 7>&-
	sleep 2.5 # tail polls each second
	[ "$1" = 1 ] && agentd_start --root "$ROOT" --listen "$ADDR"
	printf 'five\n' >>"$ROOT/d/log"
	poll_until $((RPC_TIMEOUT + 5)) grep -q five "$out" ||
		{ cat "$BATS_TEST_TMPDIR/tail.err" >&2; return 1; }
	sleep 1
	kill "$tp"
	wait "$tp" 2>/dev/null || true
	assert_eq "$(cat "$BATS_TEST_TMPDIR/tail.err")" ""
	assert_eq "$(cat "$out")" $'one\ntwo\nthree\nfour\nfive'
}

@test "R1: a listing read on after the POD appended to a file in it gives the kernel no older size: tail -f of the file prints each line once" {
	wsb_runsc && skip "changes the pod's files from the host; gVisor's inotify sees only changes made in the sandbox"
	tail_listing 0
}

@test "C1: a listing read on after agentd went away gives the kernel no older size: tail -f of a file in it prints each line once" {
	wsb_runsc && skip "kills agentd outside the sandbox"
	tail_listing 1
}

# holder_start PATH: run $BATS_TEST_TMPDIR/holder.py (the test wrote it)
# on PATH, its stdin on the FIFO holder.in, which fd 7 holds open (a line
# written there lets the script go on), its output in holder.out, which
# `said WORD` looks in for a line that starts with WORD.
holder_start() {
	local holder=$BATS_TEST_TMPDIR/holder
	mkfifo "$holder.in"
	"$PY" "$holder.py" "$1" <"$holder.in" >"$holder.out" 2>&1 3>&- &
	# shellcheck disable=SC2031 # WSB_PIDS is the test's global (a @test is no subshell)
	WSB_PIDS+=("$!")
	exec 7>"$holder.in"
}

said() {
	grep -q "^$1" "$BATS_TEST_TMPDIR/holder.out"
}

@test "C1: a closed program's file reopened after an agentd restart is not held open for writing; its open descriptor still writes" {
	wsb_runsc && skip "restarts agentd outside the sandbox"
	local holder=$BATS_TEST_TMPDIR/holder
	up tcp
	# A descriptor's close gives agentd's writable handle of a file with
	# an execute bit back, keeping a read-only one; after a restart the
	# first call reopens that by path, read-only still: the pod can run
	# the file (no ETXTBSY), and a write opens it for writing again.
	cat >"$holder.py" <<-'EOF'
	import os, sys
	fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o755)
	os.write(fd, b"#!/bin/sh\nexit 3\n")
	os.close(os.dup(fd))
	print("parked", flush=True)
	sys.stdin.readline()
	os.fsync(fd)  # a call on the handle agentd lost: reopened by path
	print("read", os.pread(fd, 9, 0).decode(), flush=True)
	sys.stdin.readline()
	os.write(fd, b"#")
	os.close(fd)
	print("done", flush=True)
	EOF
	holder_start "$MNT/p"
	poll_until 10 said parked || { cat "$holder.out" >&3; return 1; }
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	agentd_start --root "$ROOT" --listen "$ADDR" 7>&-
	recovers "after restart: create" touch "$MNT/q"
	no_problems
	echo >&7
	poll_until 30 said read || { cat "$holder.out" >&3; return 1; }
	run "$ROOT/p"
	assert_eq "$status $output" "3 " "the program run in the POD"
	echo >&7
	poll_until 10 said 'done' || { cat "$holder.out" >&3; return 1; }
	exec 7>&-
	assert_eq "$(cat "$holder.out")" $'parked\nread #!/bin/sh\ndone'
	assert_eq "$(cat "$ROOT/p")" $'#!/bin/sh\nexit 3\n#'
}

@test "C1: a descriptor whose file the POD replaced while agentd was down fails after the restart: read EIO, fstat and /proc/self/fd reopen never show the new file" {
	wsb_runsc && skip "restarts agentd outside the sandbox"
	local holder=$BATS_TEST_TMPDIR/holder
	up tcp
	printf 'AAAA-old-version-longer\n' >"$ROOT/x1"
	cat >"$holder.py" <<-'EOF'
	import os, sys
	fd = os.open(sys.argv[1], os.O_RDONLY)
	st = os.fstat(fd)
	print("opened", st.st_ino, st.st_size, flush=True)
	sys.stdin.readline()
	def err(f):
	    try:
	        r = f()
	        return "ok:%r" % (r,)
	    except OSError as e:
	        return os.strerror(e.errno)
	print("pread", err(lambda: os.pread(fd, 100, 0)))
	print("fstat", err(lambda: (os.fstat(fd).st_ino, os.fstat(fd).st_size)))
	print("reopen", err(lambda: open("/proc/self/fd/%d" % fd).read()), flush=True)
	# Once the mount has caught up with the pod (the name went to
	# another file): still the descriptor's own error, not ENOENT.
	import time
	time.sleep(2)
	print("fstat", err(lambda: (os.fstat(fd).st_ino, os.fstat(fd).st_size)), flush=True)
	EOF
	holder_start "$MNT/x1"
	poll_until 10 said opened || { cat "$holder.out" >&3; return 1; }
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	# The old file keeps a name: its inode number is not used again.
	ln "$ROOT/x1" "$ROOT/was"
	printf 'new\n' >"$ROOT/x1.t"
	mv "$ROOT/x1.t" "$ROOT/x1"
	agentd_start --root "$ROOT" --listen "$ADDR" 7>&-
	recovers "after restart: create" touch "$MNT/q"
	echo >&7
	poll_until 30 said reopen || { cat "$holder.out" >&3; return 1; }
	poll_until 10 bash -c '[ "$(grep -c ^fstat "$1")" = 2 ]' _ "$holder.out"
	exec 7>&-
	# Before: fstat gave the new file's inode and size 4, and the reopen
	# read "new" (a local disk, or the mount while agentd stays up, gives
	# the old file for both).
	assert_eq "$(sed 1d "$holder.out")" $'pread Input/output error\nfstat Stale file handle\nreopen Input/output error\nfstat Stale file handle'
	no_problems
}

@test "C1: a descriptor whose file the POD renamed while agentd was down: fstat fails ESTALE after the restart, and still once the mount has caught up, never ENOENT" {
	wsb_runsc && skip "restarts agentd outside the sandbox"
	local fifo=$BATS_TEST_TMPDIR/go rp
	up tcp
	printf 'L1\n' >"$ROOT/log8"
	mkfifo "$fifo"
	"$PY" - "$MNT/log8" "$fifo" >"$BATS_TEST_TMPDIR/out" 2>&1 <<-'EOF' &
	import os, sys, time
	fd = os.open(sys.argv[1], os.O_RDONLY)
	print("opened", flush=True)
	open(sys.argv[2]).read()
	for i in range(8):
	    try:
	        os.fstat(fd)
	        print("ok")
	    except OSError as e:
	        print(os.strerror(e.errno))
	    time.sleep(0.5)
	EOF
	rp=$!
	poll_until 10 grep -q opened "$BATS_TEST_TMPDIR/out"
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	mv "$ROOT/log8" "$ROOT/log8.1"
	agentd_start --root "$ROOT" --listen "$ADDR"
	recovers "after restart: create" touch "$MNT/q"
	echo go >"$fifo"
	wait "$rp"
	assert_eq "$(sed 1d "$BATS_TEST_TMPDIR/out" | sort -u)" "Stale file handle"
}

@test "C1: a directory that is a process's cwd stays its cwd through an agentd restart, also when looked up while agentd was away" {
	up tcp
	mkdir -p "$MNT/g2/sub"
	bg cwdholder bash -c 'cd "$1" && exec sleep 120' _ "$MNT/g2"
	local pid=$BG_PID i
	for ((i = 0; i < 100; i++)); do
		[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$MNT/g2" ] && break
		sleep 0.05
	done
	assert_eq "$(readlink "/proc/$pid/cwd")" "$MNT/g2"
	kill -KILL "$AGENTD_PID"
	wait_gone "$AGENTD_PID" 5
	# A stat of it (and under it) while agentd is away gives what the
	# mount knew (outage attributes); once it failed, and the kernel
	# dropped its entry for that, and the cwd stayed "(deleted)" after
	# agentd was back. A listing, which needs agentd, fails.
	bounded "stat" stat "$MNT/g2"
	bounded "stat below" stat "$MNT/g2/sub"
	bounded_fail "ls" ls "$MNT/g2/sub"
	assert_eq "$(readlink "/proc/$pid/cwd")" "$MNT/g2"
	agentd_start --root "$ROOT" --listen "$ADDR"
	recovers "after restart: ls" ls "$MNT/g2/sub"
	assert_eq "$(readlink "/proc/$pid/cwd")" "$MNT/g2"
	# What git does first: getcwd(3) in that cwd.
	run "$PY" -c 'import os, sys; os.chdir("/proc/%s/cwd" % sys.argv[1]); print(os.getcwd())' "$pid"
	assert_status 0
	assert_eq "$output" "$MNT/g2"
	kill -KILL -- "-$pid"
	wait_gone "$pid" 5
	no_problems
}

@test "C1: agentd stopped (SIGSTOP): calls fail within the bound, never hang; after SIGCONT the mount works" {
	up
	printf 'synced before the stop\n' >"$BATS_TEST_TMPDIR/small"
	write_synced "$MNT/f" "$BATS_TEST_TMPDIR/small"
	assert_content "$ROOT/f" $'synced before the stop\n'
	local orig_wsfs=$WSFS_PID

	kill -STOP "$AGENTD_PID"
	bounded_fail "cat" cat "$MNT/f"
	bounded_fail "write" bash -c 'echo x > "$1"' _ "$MNT/new"
	bounded "ls" ls "$MNT"
	bounded "stat" stat "$MNT/f"
	kill -CONT "$AGENTD_PID"

	recovers "after SIGCONT: cat" content_is "$MNT/f" $'synced before the stop\n'
	show_latencies
	proc_alive "$orig_wsfs"
	is_mounted "$MNT"
	assert_content "$MNT/f" $'synced before the stop\n'
	echo after >"$MNT/after"
	assert_content "$ROOT/after" $'after\n'
	assert_content "$ROOT/f" $'synced before the stop\n'
	no_problems
}

@test "C1: agentd restarted twice on a unix socket; wsfs exits 0 on unmount" {
	up
	echo one >"$MNT/f"
	local round
	for round in 1 2; do
		agentd_stop
		bounded_fail "cat while down ($round)" cat "$MNT/f"
		agentd_start --root "$ROOT" --listen "$ADDR"
		recovers "cat after restart $round" content_is "$MNT/f" $'one\n'
	done
	show_latencies
	assert_content "$MNT/f" $'one\n'
	umount_wsfs
	wsfs_wait_exit 5
	assert_eq "$WSFS_STATUS" 0 "wsfs exit status after fusermount3 -u"
	no_problems
}

# agentd_under PID: print the pid of the first agentd process among PID's
# descendants.
agentd_under() {
	ps -e -o pid=,ppid= | "$PY" -c '
import os, sys
top, agentd = int(sys.argv[1]), sys.argv[2]
kids = {}
for line in sys.stdin:
    p, pp = map(int, line.split())
    kids.setdefault(pp, []).append(p)
todo = list(kids.get(top, []))
while todo:
    p = todo.pop(0)
    try:
        argv0 = open("/proc/%d/cmdline" % p, "rb").read().split(b"\0")[0]
    except OSError:
        continue
    if os.fsdecode(argv0) == agentd:
        print(p)
        break
    todo += kids.get(p, [])' "$1" "$AGENTD"
}

@test "past agentd's --max-handles an open on the mount fails ENFILE (the limit is every client's), and works again once files close" {
	agentd_unix --max-handles 4
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	run "$PY" - "$MNT" <<-'EOF'
	import errno, os, sys
	mnt = sys.argv[1]
	held = []
	try:
	    for i in range(20):
	        held.append(os.open("%s/f%d" % (mnt, i), os.O_CREAT | os.O_RDWR, 0o644))
	    print("no limit reached")
	except OSError as e:
	    print("after %d: %s" % (len(held), errno.errorcode[e.errno]))
	for fd in held:
	    os.close(fd)
	fd = os.open(mnt + "/again", os.O_CREAT | os.O_RDWR, 0o644)
	os.close(fd)
	print("open after close: ok")
	EOF
	echo "# ${output//$'\n'/$'\n'# }" >&3 # each line a TAP comment
	assert_status 0
	assert_contains "$output" ": ENFILE"
	assert_contains "$output" "open after close: ok"
}

@test "mv over a file keeps the old one open in agentd only while the kernel holds it: 300 renames later, all of a small handle table opens" {
	# agentd keeps a file a rename through the mount replaces (so that an
	# open racing the rename still gets it); the kernel's FORGET gives it
	# back. With --max-handles 8 any kept handle left over would show as
	# EMFILE among 6 files held open at once (keeping stops at 6 in use).
	agentd_unix --max-handles 8
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	run "$PY" - "$MNT" <<-'EOF'
	import os, sys, time
	mnt = sys.argv[1]
	x, new = mnt + "/x", mnt + "/x.new"
	p = os.open(mnt + "/held", os.O_CREAT | os.O_WRONLY, 0o644)
	os.close(p)
	held = os.open(mnt + "/held", os.O_PATH)  # renamed over below: kept
	with open(new, "w") as f:
	    f.write("0")
	os.rename(new, mnt + "/held")
	for i in range(300):
	    with open(new, "w") as f:
	        f.write(str(i))
	    os.rename(new, x)
	give_up, err = time.monotonic() + 10, None
	while True:
	    fds = []
	    try:
	        for i in range(6):
	            fds.append(os.open(mnt + "/f%d" % i, os.O_CREAT | os.O_RDWR, 0o644))
	        err = None
	    except OSError as e:
	        err = e
	    for fd in fds:
	        os.close(fd)
	    if err is None or time.monotonic() > give_up:
	        break
	    time.sleep(0.1)
	print("six open at once:", err or "ok")
	with open("/proc/self/fd/%d" % held) as f:
	    print("held:", repr(f.read()))
	with open(x) as f:
	    print("x:", f.read())
	EOF
	assert_eq "$output" $'six open at once: ok\nheld: \'\'\nx: 299'
}

@test "a directory renamed around (mv A T; mv B A; mv T B) while readers open x in it through a directory fd: never ENOENT" {
	skip_sanitized "waits out graces or loops: the plain run covers it"
	# x is always there. A LOOKUP asks agentd by the path the node table
	# gives; one that crossed the renames asked about the other directory,
	# or about a name no longer there, and took a wrong answer for x:
	# ENOENT (18 to 28 in 1,000 rounds), or the other directory's x. With
	# entry_timeout=0 and no watch every open looks x up.
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,no_watch,entry_timeout=0"
	run "$PY" - "$MNT" 1000 <<-'EOF'
	import errno, os, sys, threading
	mnt, n = sys.argv[1], int(sys.argv[2])
	for d in ("A", "B"):
	    os.mkdir(mnt + "/" + d)
	    with open(mnt + "/" + d + "/x", "w") as f:
	        f.write(d)
	stop, bad, reads = False, {}, [0, 0]
	def reader(k):
	    dfd = os.open(mnt + "/A", os.O_RDONLY | os.O_DIRECTORY)
	    while not stop:
	        try:
	            with open(os.open("x", os.O_RDONLY, dir_fd=dfd)) as f:
	                if f.read() not in ("A", "B"):
	                    bad["bytes"] = bad.get("bytes", 0) + 1
	            reads[k] += 1
	        except OSError as e:
	            bad[errno.errorcode[e.errno]] = bad.get(errno.errorcode[e.errno], 0) + 1
	    os.close(dfd)
	ts = [threading.Thread(target=reader, args=(k,)) for k in (0, 1)]
	for t in ts:
	    t.start()
	for i in range(n):
	    os.rename(mnt + "/A", mnt + "/T")
	    os.rename(mnt + "/B", mnt + "/A")
	    os.rename(mnt + "/T", mnt + "/B")
	stop = True
	for t in ts:
	    t.join()
	print("bad:", bad or "none")
	print("reads by both:", min(reads) > 0)
	EOF
	assert_eq "$output" $'bad: none\nreads by both: True'
}

@test "a listing read part-way across mv x_k.new x_k in its directory: the rest of it does not bind x_k to the replaced file" {
	# READDIRPLUS hands the kernel a node per entry from the handle's
	# listing, fetched before the renames: x_k's entry named the old file
	# and took the name from the new one's node, which a descriptor held
	# by O_PATH then could not open again (13 of 20 ESTALE).
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	run "$PY" - "$MNT" <<-'EOF'
	import os, sys
	d = sys.argv[1] + "/rdp"
	os.mkdir(d)
	for i in range(440):
	    with open("%s/x_%d" % (d, i), "w") as f:
	        f.write("old")
	for k in range(20):
	    with open("%s/x_%d.new" % (d, k), "w") as f:
	        f.write("new")
	it = os.scandir(d)
	next(it)  # the first getdents64: part of the listing
	held = []
	for k in range(20):
	    os.rename("%s/x_%d.new" % (d, k), "%s/x_%d" % (d, k))
	    held.append(os.open("%s/x_%d" % (d, k), os.O_PATH))
	listed = 1 + sum(1 for _ in it)
	got = []
	for p in held:
	    try:
	        with open("/proc/self/fd/%d" % p) as f:
	            got.append(f.read())
	    except OSError as e:
	        got.append(os.strerror(e.errno))
	print("listed:", listed >= 440)
	print("reopened:", sorted(set(got)))
	EOF
	assert_eq "$output" $'listed: True\nreopened: [\'new\']'
}

@test "sessions: the files a SIGKILLed wsfs held open close in agentd once --session-grace passes; a new mount opens as many" {
	# wsfs names one session for its life; agentd releases the session's
	# handles once no call or stream of it has run for the grace. Before
	# sessions, the three stayed open until agentd exited, and with
	# --max-handles 4 every later mount got EMFILE past one open file.
	agentd_unix --max-handles 4 --session-grace 5 --log-level info
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	printf a >"$ROOT/a"
	printf b >"$ROOT/b"
	printf c >"$ROOT/c"
	exec 5<"$MNT/a" 6<"$MNT/b" 7<"$MNT/c"
	kill -KILL "$WSFS_PID"
	wait_gone "$WSFS_PID" 5
	exec 5<&- 6<&- 7<&-
	# A wsfs on the dead mount says what to do.
	run "$WSFS" -f "$ADDR" "$MNT"
	assert_status 1
	assert_contains "$output" "server is gone is still mounted; unmount it first: fusermount3 -u $MNT"
	umount_wsfs
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	run "$PY" - "$MNT" <<-'EOF'
	import os, sys, time
	mnt = sys.argv[1]
	give_up, err = time.monotonic() + 15, None
	while True:
	    fds = []
	    try:
	        for name in "abcd":
	            fds.append(os.open(mnt + "/" + name, os.O_CREAT | os.O_RDONLY, 0o644))
	        err = None
	    except OSError as e:
	        err = e
	    for fd in fds:
	        os.close(fd)
	    if err is None or time.monotonic() > give_up:
	        break
	    time.sleep(0.1)
	print("four open at once:", err or "ok")
	EOF
	assert_eq "$output" "four open at once: ok"
	run grep -c "released 3 open handles" "$AGENTD_ERR"
	assert_eq "$output" 1
}

@test "sessions: a connection lost for less than --session-grace keeps every open file, an unlinked one too; past it, files open by name carry on and an unlinked one fails with EIO" {
	skip_sanitized "waits out graces or loops: the plain run covers it"
	agentd_unix --session-grace 5
	local relay="$BATS_TEST_TMPDIR/relay"
	relay_up relay "$relay" 0
	wsfs_start -o "rpc_timeout=$RPC_TIMEOUT" -f "unix:$relay"
	printf named >"$ROOT/named"
	printf gone >"$ROOT/gone"
	exec 5<>"$MNT/named" 6<"$MNT/gone"
	rm "$MNT/gone"
	# pread(2) through the descriptors this shell holds: "BYTES" or the
	# errno's name.
	pread_fds() {
		"$PY" -c '
import errno, os
out = []
for fd in (5, 6):
    try:
        out.append(os.pread(fd, 16, 0).decode())
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(" ".join(out))'
	}
	fds_read() { [ "$(pread_fds)" = "$1" ]; }
	relay_kill() {
		kill -KILL -- "-$RELAY_PID"
		wait "$RELAY_PID" 2>/dev/null || true
	}
	# A drop of the connection well within the grace.
	relay_kill
	sleep 0.5
	relay_up relay2 "$relay" 0
	recovers "reads after a short drop" fds_read "named gone"
	# A drop longer than the grace: agentd ends the session.
	relay_kill
	sleep 7
	relay_up relay3 "$relay" 0
	recovers "the named file after a long drop" content_is "$MNT/named" named
	run pread_fds
	assert_eq "$output" "named EIO"
	printf X >&5
	exec 5>&- 6<&-
	assert_content "$ROOT/named" Xamed
	no_problems
}

@test "sessions: a wsfs killed behind a link that went silent (no close reaches agentd) loses its files within keepalive + grace" {
	skip_sanitized "waits out graces or loops: the plain run covers it"
	# A host that vanished, or a partition, closes nothing: agentd's
	# keepalive pings (every half grace) find the connection dead and end
	# its Watch. Without them, gRPC's server waits 2 hours.
	agentd_unix --session-grace 5 --log-level info
	local relay="$BATS_TEST_TMPDIR/relay"
	relay_up relay "$relay" 0
	wsfs_start -o "rpc_timeout=$RPC_TIMEOUT" -f "unix:$relay"
	printf a >"$ROOT/a"
	exec 5<"$MNT/a"
	kill -STOP -- "-$RELAY_PID"
	kill -KILL "$WSFS_PID"
	wait_gone "$WSFS_PID" 5
	exec 5<&-
	released() { grep -q "released 1 open handle" "$AGENTD_ERR"; }
	run poll_until 25 released
	kill -CONT -- "-$RELAY_PID"
	assert_status 0
}

@test "sessions: with -o no_watch the mount still holds its session (an unlinked open file reads past the grace); agentd stops at once on SIGTERM" {
	skip_sanitized "waits out graces or loops: the plain run covers it"
	agentd_unix --session-grace 5
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,no_watch"
	printf gone >"$ROOT/gone"
	exec 6<"$MNT/gone"
	rm "$MNT/gone"
	sleep 7
	run "$PY" -c 'import os; print(os.pread(6, 16, 0).decode())'
	exec 6<&-
	assert_eq "$output" gone
	# The stream that holds the session ends with agentd's shutdown, not
	# after its 10 s drain.
	local t0 ms
	t0=$(now_ms)
	agentd_stop
	ms=$(($(now_ms) - t0))
	assert_eq "$AGENTD_STATUS" 0
	[ "$ms" -lt 5000 ] || {
		echo "# agentd took $ms ms to stop" >&3
		return 1
	}
}

@test "wsfs --exec: a mount over agentd --stdio works, sees pod changes, and survives the command dying" {
	local cmd="$AGENTD --root $ROOT --stdio" pid
	mount_wsfs_exec "$cmd" -o "rpc_timeout=$RPC_TIMEOUT"
	echo hi >"$MNT/f"
	assert_content "$ROOT/f" $'hi\n'
	ls -A "$MNT" >/dev/null
	printf 'pod\n' >"$ROOT/p"
	visible "exec transport: pod-side create" content_is "$MNT/p" $'pod\n'
	# The agentd that CMD started: a descendant of wsfs (CMD runs in a
	# process group of its own).
	pid=$(agentd_under "$WSFS_PID")
	[ -n "$pid" ] || {
		echo "# no agentd --stdio under wsfs (pgid $WSFS_PID)" >&3
		return 1
	}
	kill -KILL "$pid"
	wait_gone "$pid" 5
	recovers "exec transport: cat after the command died" content_is "$MNT/f" $'hi\n'
	echo again >"$MNT/g"
	assert_content "$ROOT/g" $'again\n'
	show_latencies
	no_problems
}

@test "wsfs --exec: a transport that hangs (its agentd --stdio stopped) is run again once nothing has answered for twice rpc_timeout" {
	local cmd="$AGENTD --root $ROOT --stdio" pid t0 ms
	mount_wsfs_exec "$cmd" -o "rpc_timeout=$RPC_TIMEOUT"
	echo hi >"$MNT/f"
	pid=$(agentd_under "$WSFS_PID")
	[ -n "$pid" ]
	# shellcheck disable=SC2030,SC2031 # bats @test is not a subshell; WSB_PIDS is its global
	WSB_PIDS+=("$pid")
	# A `kubectl exec` whose link hangs: nothing ends, nothing answers.
	kill -STOP "$pid"
	t0=$(now_ms)
	run cat "$MNT/f"
	assert_status 1
	# Before: ENOTCONN for good (125 s and more) while agentd was healthy.
	if ! poll_until 30 content_is "$MNT/f" $'hi\n'; then
		kill -CONT "$pid"
		return 1
	fi
	ms=$(($(now_ms) - t0))
	echo "# the mount works again ${ms} ms after the transport hung (rpc_timeout ${RPC_TIMEOUT} s)" >&3
	# The first call's deadline, then probes until twice rpc_timeout has
	# passed without an answer, then the new command.
	((ms <= (4 * RPC_TIMEOUT + 3) * 1000))
	grep -q "running it again" "$WSFS_ERR"
	kill -CONT "$pid" 2>/dev/null || true
	echo again >"$MNT/g"
	assert_content "$ROOT/g" $'again\n'
}

@test "wsfs --exec: when a command lingers after its agentd died, the mount works again at once, not after wsfs has waited for the old one, which is then reaped" {
	# The command closes the transport and stays (a `kubectl exec` slow
	# to end its stream): wsfs waited up to 3 s for it, on the monitor,
	# before it ran CMD again, and the mount said ENOTCONN meanwhile.
	skip_sanitized "waits out graces or loops: the plain run covers it"
	local cmd="$AGENTD --root $ROOT --stdio; exec >&- <&-; sleep 30" pid old i
	mount_wsfs_exec "$cmd" -o "rpc_timeout=$RPC_TIMEOUT"
	echo hi >"$MNT/f"
	pid=$(agentd_under "$WSFS_PID")
	[ -n "$pid" ]
	old=$(ps -o pgid= -p "$pid" | tr -d ' ') # the command's shell leads its group
	[ -n "$old" ] && [ "$old" != "$WSFS_PID" ]
	kill -KILL "$pid"
	recovers "exec transport: cat after the command closed it" content_is "$MNT/f" $'hi\n'
	# The old command sleeps for 30 s unless wsfs ends it (SIGTERM after
	# 2 s): still there when the mount works again.
	proc_alive "$old" || problem "the mount worked again only after the old command was gone"
	# Then reaped (no zombie left): 2 s, SIGTERM, at most 1 s more.
	for ((i = 0; i < 200; i++)); do
		[ -e "/proc/$old" ] || break
		sleep 0.05
	done
	[ ! -e "/proc/$old" ] || {
		echo "# the old command ($old) is still there (or a zombie) after 10 s" >&3
		return 1
	}
	show_latencies
	no_problems
}

# Write-behind (fusefs/fs.c): write(2) returns once wsfs has the bytes and
# up to -o write_behind (default 4) WRITEs reach agentd in the background.

# with_eio N SCRIPT ARGS...: `run` tests/python/SCRIPT while strace makes the
# Nth pwrite64 of each agentd thread fail with EIO.
# with_eio WHEN SCRIPT ARGS...: run tests/python/SCRIPT while agentd's
# pwrite64 calls numbered WHEN (strace's when=) fail with EIO.
with_eio() {
	with_inject pwrite64 "$@"
}

# with_inject SYSCALL WHEN SCRIPT ARGS...: the same for agentd's SYSCALL.
with_inject() {
	local sys=$1 when=$2 spid
	shift 2
	strace -f -qq -p "$AGENTD_PID" -e trace="$sys" \
		-e inject="$sys":error=EIO:when="$when" -o /dev/null &
	spid=$!
	sleep 1 # attached
	run "$PY" "$PYTESTS/$1" "${@:2}"
	kill "$spid"
	wait "$spid" || true
}

@test "setattr-behind: utimes, chown and chmod of files the mount created reach the pod merged by close, in order (a write after utimes sets mtime anew); after close each goes at once" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local n0 n1
	n0=$(calls SetAttr)
	run_py setattr_behind.py order "$MNT" "$ROOT" 60
	n1=$(calls SetAttr)
	# 180 SETATTRs (3, 2 and 4 per file): one call each before; merged,
	# one per file (or none: carried by the file's last write) and one
	# more where a write comes between, plus those the mount did not
	# know the attributes for (an echo of the file before moved the
	# mount's event count: then each is sent at once).
	echo "# SetAttr calls for 60 files and 180 changes: $((n1 - n0))" >&3
	[ "$((n1 - n0))" -lt 130 ] || { echo "$((n1 - n0)) SetAttr calls, want < 130" >&2; return 1; }
	# After close(2), nothing waits: the pod has each change at once.
	run_py setattr_behind.py closed "$MNT" "$ROOT" 100
	# Off: every change is a call, and the same results.
	umount_wsfs
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,setattr_behind=0"
	mkdir "$MNT/off"
	n0=$(calls SetAttr)
	run_py setattr_behind.py order "$MNT/off" "$ROOT/off" 30
	n1=$(calls SetAttr)
	# 90 changes, each its own call; an fstat through the handle is a
	# SetAttr that sets nothing too, made when a pod event crossed the
	# kernel's GETATTR (fchown asks first): under a loaded suite one or
	# two (91 seen, with and without birth times).
	echo "# SetAttr calls for 30 files and 90 changes, setattr_behind=0: $((n1 - n0))" >&3
	[ "$((n1 - n0))" -ge 90 ] && [ "$((n1 - n0))" -le 95 ] ||
		{ echo "$((n1 - n0)) SetAttr calls, want 90 (+ at most 5 fstats)" >&2; return 1; }
}

# shellcheck disable=SC2030 # bats @test is not a subshell; status/output are run's globals
@test "setattr-behind: a chmod and utimes of a file the host keeps open reach the pod within 10 x gather_ms, and the pod's later chmod and append stay (also with gather_ms=0)" {
	local opts
	agentd_unix
	for opts in "" ",gather_ms=0"; do
		mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT$opts"
		touch "$ROOT/probe"
		visible "watch live" content_is "$MNT/probe" ""
		rm -f "$ROOT/held"
		setattr_held
		umount_wsfs
	done
}

# setattr_held: the body of the test above, on the current mount.
# shellcheck disable=SC2031 # run's status/output, set in the caller's test
setattr_held() {
	run "$PY" - "$MNT" "$ROOT" <<'PY'
import os, sys, time
M, R = sys.argv[1:3]
fd = os.open(M + "/held", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(fd, b"x" * 10)
os.fchmod(fd, 0o600)
os.utime(fd, ns=(1000, 2000))
# Kept behind, the changes go within 50 ms (10 x gather_ms), not at close.
deadline = time.monotonic() + 2
while time.monotonic() < deadline:
    st = os.stat(R + "/held")
    if st.st_mode & 0o7777 == 0o600 and st.st_mtime_ns == 2000:
        break
    time.sleep(0.01)
print("pod while open: %o %d" % (st.st_mode & 0o7777, st.st_mtime_ns))
# The pod changes the file after that: its change is the last.
os.chmod(R + "/held", 0o640)
with open(R + "/held", "ab") as f:
    f.write(b"POD")
pod_mtime = os.stat(R + "/held").st_mtime_ns
os.close(fd)
st = os.stat(R + "/held")
print("pod after close: %o %s %d" % (st.st_mode & 0o7777, st.st_mtime_ns == pod_mtime, st.st_size))
PY
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
	assert_contains "$output" "pod while open: 600 2000"
	assert_contains "$output" "pod after close: 640 True 13"
}

@test "setattr-behind: tar -p's times, owner and mode of a file written in small writes go with its one Write, no SetAttr" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	local w0 w1 s0 s1
	w0=$(calls Write)
	s0=$(calls SetAttr)
	run_py setattr_behind.py tar "$MNT" "$ROOT" 50
	w1=$(calls Write)
	s1=$(calls SetAttr)
	echo "# 50 files of 3 writes and 3 changes: $((w1 - w0)) Write, $((s1 - s0)) SetAttr calls" >&3
	# One Write each and no SetAttr (50 each when every change was a
	# call of its own), save where a run waited 5 ms for the next call
	# and went alone (a loaded host): a few more of each.
	[ "$((w1 - w0))" -ge 50 ] && [ "$((w1 - w0))" -le 75 ] ||
		{ echo "$((w1 - w0)) Write calls, want 50 to 75" >&2; return 1; }
	[ "$((s1 - s0))" -le 15 ] || { echo "$((s1 - s0)) SetAttr calls, want <= 15" >&2; return 1; }
}

@test "setattr-behind: a chmod agentd fails (EIO injected) after it returned fails close with EIO; the mount then shows the pod's mode" {
	command -v strace >/dev/null || skip "strace is not installed"
	up
	touch "$ROOT/probe"
	visible "watch live" content_is "$MNT/probe" ""
	with_inject fchmod 1+ setattr_behind.py eio "$MNT" "$ROOT" 10
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
	# At least one was kept behind and failed at close, not at the chmod.
	assert_contains "$output" ": close: EIO"
}

@test "write-behind: 8 MiB into a 4 MiB workspace fails with ENOSPC at a write or at close; the mount then reads what the pod has" {
	mount -t tmpfs -o size=4m wsb-enospc "$ROOT" 2>/dev/null || skip "cannot mount a tmpfs here"
	LOOP_ROOT=$ROOT
	up
	run_py write_behind.py enospc "$MNT" "$ROOT"
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	# The writer that ignores nothing: dd stops with the error, non-zero.
	rm -f "$MNT/big"
	run dd if=/dev/zero of="$MNT/dd" bs=1M count=8
	assert_status 1
	assert_contains "$output" "No space left on device"
}

@test "write-behind: after each write, stat and an O_DIRECT read see it; after close or fsync the pod has every byte" {
	up
	run_py write_behind.py follow "$MNT" "$ROOT"
}

@test "write-behind: two handles writing over each other's bytes land in the pod in the order they were made" {
	up
	mkdir "$BATS_TEST_TMPDIR/local"
	run_py write_behind.py overlap "$MNT" "$ROOT" "$BATS_TEST_TMPDIR/local"
}

@test "write gathering: 100 files made in 11 small writes each reach agentd in one Write each, whole by each close; with write_behind=0 or gather_ms=0 each write is a Write" {
	agentd_unix --log-level debug
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	local n0 n1
	n0=$(calls Write)
	run_py write_behind.py gather "$MNT" "$ROOT" 100
	n1=$(calls Write)
	echo "# Write calls for 100 files of 11 writes: $((n1 - n0))" >&3
	# One each (1,100 when each write was one), and some more where a
	# run waited 5 ms for the next write and went alone (a loaded host,
	# ASan, gVisor: up to 131 seen).
	[ "$((n1 - n0))" -ge 100 ] && [ "$((n1 - n0))" -le 250 ] ||
		{ echo "$((n1 - n0)) Write calls, want 100 to 250" >&2; return 1; }
	umount_wsfs
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,write_behind=0"
	mkdir "$MNT/off"
	n0=$(calls Write)
	run_py write_behind.py gather "$MNT/off" "$ROOT/off" 20
	n1=$(calls Write)
	assert_eq "$((n1 - n0))" 220
	umount_wsfs
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,gather_ms=0"
	mkdir "$MNT/nogather"
	n0=$(calls Write)
	run_py write_behind.py gather "$MNT/nogather" "$ROOT/nogather" 20
	n1=$(calls Write)
	assert_eq "$((n1 - n0))" 220
}

@test "write gathering: small writes to a file left open reach the pod within moments, without close" {
	up
	run_py write_behind.py linger "$MNT" "$ROOT"
	printf '%s\n' "$output" | sed 's/^/# /' >&3
}

@test "write gathering: with -o gather_ms long, bytes of a file left open stay gathered; wsfs stopped (SIGTERM) sends them before it exits" {
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,gather_ms=600000"
	local i
	# Not bash's `>&5`: it closes a dup after each write (FLUSH).
	bg holder "$PY" -c 'import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"one\n")
os.write(fd, b"two\n")
open(sys.argv[2], "w").close()
time.sleep(120)' "$MNT/held" "$BATS_TEST_TMPDIR/written"
	for ((i = 0; i < 200; i++)); do
		[ -e "$BATS_TEST_TMPDIR/written" ] && break
		sleep 0.05
	done
	[ -e "$BATS_TEST_TMPDIR/written" ]
	# Nothing else on the mount from here: any request would send them.
	sleep 0.5
	assert_eq "$(stat -c %s "$ROOT/held")" 0 "the pod's size while gathered"
	# The session loop ends with the file still open (no FLUSH comes);
	# wsfs_send_behind() must send the run before wsfs exits.
	kill -TERM "$WSFS_PID"
	wsfs_wait_exit 10
	assert_content "$ROOT/held" $'one\ntwo\n'
}

@test "write gathering: with -o gather_ms long, writes to 400 open files hold at most 64 MiB gathered; the rest reach the pod while open" {
	skip_sanitized "80 MiB through the mount (9 s): the plain run covers the cap"
	agentd_unix
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,gather_ms=600000"
	run_py write_behind.py cap "$MNT" "$ROOT"
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	# 200 KiB each: the 328th would pass 64 MiB (with room for a whole
	# run, 256 KiB) and sends the 327 before it.
	assert_contains "$output" "the pod has 328 whole"
}

@test "write gathering: two handles writing over each other's bytes in 4 KiB writes land in the pod in the order they were made" {
	up
	mkdir "$BATS_TEST_TMPDIR/local"
	run_py write_behind.py overlap_small "$MNT" "$ROOT" "$BATS_TEST_TMPDIR/local"
}

@test "write gathering: gathered writes agentd fails (EIO injected) fail close or fsync with EIO, never succeed; the mount then reads what the pod has" {
	command -v strace >/dev/null || skip "strace is not installed"
	up
	with_eio 1+ write_behind.py gather_eio "$MNT" "$ROOT" 10
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
	assert_contains "$output" "e10: fsync: EIO"
}

@test "write-behind: when agentd fails some writes of a 16 MiB write(2) (EIO injected), a writer that retries short counts gets the error or the pod has every byte" {
	command -v strace >/dev/null || skip "strace is not installed"
	up
	local i
	# The kernel turns the error of any but the first WRITE of a write(2)
	# into a short count; the rest, written again, must not succeed over
	# the hole (it did 1 time in 4).
	for i in 1 2 3 4 5; do
		with_eio 3 write_behind.py retry "$MNT" "$ROOT"
		echo "# $output" >&3
		assert_status 0
	done
}

@test "write-behind: a write agentd fails (EIO injected) fails fsync of every descriptor open on the file" {
	command -v strace >/dev/null || skip "strace is not installed"
	up
	with_eio 3 write_behind.py others "$MNT" "$ROOT"
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
	assert_contains "$output" "other descriptor: EIO"
}

@test "write-behind: a write agentd fails (EIO injected) still fails the writer's fsync after a child it ran closed the descriptor" {
	command -v strace >/dev/null || skip "strace is not installed"
	# One cq thread: strace counts each thread's calls (when=3).
	agentd_unix --threads 1
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT"
	# The child's close (exec, O_CLOEXEC) is a FLUSH of the same open
	# file: it took the error, and the writer's fsync and close succeeded
	# over 1 MiB the pod never got.
	with_eio 3 write_behind.py forked "$MNT" "$ROOT"
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
}

@test "write-behind: a failed write over cached pages: a descriptor open all along reads what the pod has" {
	command -v strace >/dev/null || skip "strace is not installed"
	# One cq thread: strace counts each thread's calls (when=2). Without
	# the watch: its events about the file would drop the pages too.
	agentd_unix --threads 1
	mount_wsfs -o "rpc_timeout=$RPC_TIMEOUT,no_watch"
	with_eio 2 write_behind.py cached "$MNT" "$ROOT"
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
}

@test "write-behind: on a link that carries 1 MiB well within rpc_timeout, 16 MiB written behind do not time out" {
	agentd_unix
	# 4 MB/s towards agentd, rpc_timeout 1 s, 8 writes in flight: one
	# 1 MiB Write takes 0.26 s, eight together 2.1 s, so each deadline
	# must count the writes that share the link with it (they failed
	# with EIO when it did not), those begun after it too: gRPC sends
	# them in no fixed order (the first one behind failed, overtaken,
	# when its deadline counted only the writes begun before it).
	relay_up slowlink "$BATS_TEST_TMPDIR/slow" 4000000
	wsfs_start -o rpc_timeout=1,write_behind=8 -f "unix:$BATS_TEST_TMPDIR/slow"
	head -c 16777216 /dev/urandom >"$BATS_TEST_TMPDIR/data"
	run dd if="$BATS_TEST_TMPDIR/data" of="$MNT/f" bs=1M conv=fsync
	[ "$status" -eq 0 ] || sed 's/^/# wsfs: /' "$WSFS_ERR" >&3
	assert_status 0
	cmp "$BATS_TEST_TMPDIR/data" "$ROOT/f"
}

@test "C1: agentd stopped during a stream of 1 MiB writes: a write or the close fails with EIO/ENOTCONN within the bound; after SIGCONT the mount works" {
	up
	# A Write larger than the socket buffers to a peer that stopped
	# reading never ended in gRPC (its deadline cannot end a write the
	# transport has begun): the writer hung in the kernel for good.
	run "$PY" "$PYTESTS/write_behind.py" stall "$MNT" "$ROOT" "$AGENTD_PID" $((RPC_TIMEOUT + 2))
	kill -CONT "$AGENTD_PID"
	printf '%s\n' "$output" | sed 's/^/# /' >&3
	assert_status 0
	recovers "after SIGCONT: a write" bash -c 'echo after >"$1"' _ "$MNT/after"
	assert_content "$ROOT/after" $'after\n'
	show_latencies
	no_problems
}

@test "unlink-behind: removals the mount answered before agentd had done them reach the pod before the next request: a listing, a create of the name, rmdir" {
	up
	mkdir "$MNT/ub"
	for i in $(seq 1 300); do : >"$MNT/ub/f$i"; done
	ls -l "$MNT/ub" >/dev/null
	# The first unlink in the directory waits for agentd; the rest go
	# behind it.
	rm "$MNT/ub/f1"
	# One process, no pause between the calls: a name made again
	# (O_EXCL) right after its unlink, a listing right after unlinks.
	run "$PY" - "$MNT/ub" "$ROOT/ub" <<'PY'
import os, sys
M, R = sys.argv[1:3]
for i in range(2, 301):
    os.unlink("%s/f%d" % (M, i))
    fd = os.open("%s/f%d" % (M, i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"again")
    os.close(fd)
again = sum(open("%s/f%d" % (R, i)).read() == "again" for i in range(2, 301))
for i in range(2, 301):
    os.unlink("%s/f%d" % (M, i))
print("made again %d; mount %r pod %r" % (again, os.listdir(M), os.listdir(R)))
PY
	assert_status 0
	assert_eq "$output" "made again 299; mount [] pod []" "names made again right after their unlink; listings right after unlinks"
	# rm -rf returns once all of it is gone in the pod.
	mkdir -p "$MNT/ub/t/u"
	for i in $(seq 1 100); do : >"$MNT/ub/t/u/h$i"; : >"$MNT/ub/t/h$i"; done
	rm -rf "$MNT/ub/t"
	[ ! -e "$ROOT/ub/t" ]
}

@test "unlink-behind: an unlink agentd then refuses (an immutable file) leaves the name, logged, and every later one in that directory waits; sticky directories and ones the pod changed are not sent behind" {
	wsb_runsc && skip "changes the pod's files from the host; gVisor's inotify sees only changes made in the sandbox"
	up
	mkdir "$MNT/ub" "$MNT/st" "$MNT/pc"
	chmod 1777 "$MNT/st"
	for f in ub/a ub/b ub/c pc/a pc/b st/a st/b; do : >"$MNT/$f"; done
	ls -l "$MNT/ub" "$MNT/st" "$MNT/pc" >/dev/null
	chattr +i "$ROOT/ub/b" 2>/dev/null || skip "chattr +i is refused on this file system"
	IMMUTABLE=("$ROOT/ub/b")
	chattr +i "$ROOT/st/b" "$ROOT/pc/b"
	IMMUTABLE+=("$ROOT/st/b" "$ROOT/pc/b")
	rm "$MNT/ub/a" # proves the directory: agentd may remove names in it
	# Sent behind: rm was answered before agentd refused it (EPERM).
	rm "$MNT/ub/b"
	run ls -A "$MNT/ub"
	assert_eq "$output" $'b\nc' "the name agentd kept is listed again"
	grep -q "unlink of 'ub/b' failed after the mount had answered it: Operation not permitted; the name is still there" "$WSFS_ERR" ||
		{ sed 's/^/# wsfs: /' "$WSFS_ERR" >&3; return 1; }
	# The directory is no longer proven, nor proven again by an unlink
	# that succeeds: a second rm of the file waits and fails.
	rm "$MNT/ub/c"
	run --separate-stderr rm "$MNT/ub/b"
	assert_status 1
	[[ $stderr == *"Operation not permitted"* ]]
	# A directory with the mode, owner and group of the proven one it is
	# in is taken for proven too (rm -rf of many small directories).
	mkdir -p "$MNT/pt/sub"
	: >"$MNT/pt/a"
	: >"$MNT/pt/sub/x"
	ls -l "$MNT/pt" "$MNT/pt/sub" >/dev/null
	chattr +i "$ROOT/pt/sub/x"
	IMMUTABLE+=("$ROOT/pt/sub/x")
	rm "$MNT/pt/a"
	rm "$MNT/pt/sub/x"
	grep -q "unlink of 'pt/sub/x' failed after the mount had answered it" "$WSFS_ERR"
	[ -e "$MNT/pt/sub/x" ]
	# A sticky directory is never proven (removal there depends on each
	# file's owner).
	rm "$MNT/st/a"
	run --separate-stderr rm "$MNT/st/b"
	assert_status 1
	[[ $stderr == *"Operation not permitted"* ]]
	# The pod's chmod of a proven directory ends the proof.
	rm "$MNT/pc/a"
	chmod 0775 "$ROOT/pc"
	visible "the pod's chmod" bash -c '[ "$(stat -c %a "$1")" = 775 ]' _ "$MNT/pc"
	run --separate-stderr rm "$MNT/pc/b"
	assert_status 1
	[[ $stderr == *"Operation not permitted"* ]]
	assert_eq "$(grep -c "failed after the mount had answered it" "$WSFS_ERR")" 2 "unlinks answered then refused"
}

@test "unlink-behind: unlinks by a directory descriptor while another thread renames the directory back and forth through the mount all succeed and leave nothing, as on a local disk" {
	up
	# An unlink whose path a rename on its way moved got ENOENT from
	# agentd: sent behind it was taken for the pod's own removal (the
	# file stayed, unlink(2) had returned 0); waited for, it failed.
	run "$PY" - "$MNT" <<'PY'
import os, sys, threading, time
M = sys.argv[1]
n = 1000
os.mkdir(M + "/D")
for i in range(n):
    open("%s/D/f%d" % (M, i), "w").close()
os.listdir(M + "/D")
dfd = os.open(M + "/D", os.O_RDONLY | os.O_DIRECTORY)
stop = False
def mover():
    a, b = M + "/D", M + "/E"
    while not stop:
        os.rename(a, b)
        a, b = b, a
        time.sleep(0.001)
t = threading.Thread(target=mover)
t.start()
errors = 0
for i in range(n):
    try:
        os.unlink("f%d" % i, dir_fd=dfd)
    except OSError:
        errors += 1
stop = True
t.join()
print("errors %d left %d" % (errors, len(os.listdir(dfd))))
PY
	assert_status 0
	assert_eq "$output" "errors 0 left 0" "unlinks crossing renames of their directory"
	assert_eq "$(find "$ROOT" -type f | wc -l)" 0 "files left in the pod"
}

# shellcheck disable=SC2031 # bats @test is not a subshell; NOBODY_DIR is the test's global
@test "unlink-behind: agentd not root: a directory the pod made sticky, or one above it the pod closed, is not taken for proven; the unlinks fail at once" {
	local d
	wsb_runsc && skip "agentd runs as root in the sandbox here"
	up_nobody
	d=$NOBODY_DIR
	# S: root's, open to all; c in it root's (the pod's root user).
	mkdir "$d/root/S"
	chmod 0777 "$d/root/S"
	: >"$MNT/S/a"
	: >"$MNT/S/b"
	: >"$d/root/S/c"
	mkdir -p "$MNT/a/d"
	for i in 1 2 3; do : >"$MNT/a/d/f$i"; done
	ls -l "$MNT/S" "$MNT/a/d" >/dev/null
	rm "$MNT/S/a" "$MNT/a/d/f1" # proves S and a/d
	# The pod makes S sticky: c (root's) is no longer agentd's to remove.
	# The next unlink (b, agentd's own) waits and succeeds, but must not
	# prove S from the mode the kernel had before.
	chmod 1777 "$d/root/S"
	visible "the pod's chmod +t" bash -c '[ "$(stat -c %a "$1")" = 1777 ]' _ "$MNT/S"
	rm "$MNT/S/b"
	run --separate-stderr rm "$MNT/S/c"
	assert_status 1
	[[ $stderr == *"Operation not permitted"* ]]
	# The pod takes search permission off a, above the proven a/d.
	chmod 0 "$d/root/a"
	visible "the pod's chmod 0" bash -c '[ "$(stat -c %a "$1")" = 0 ]' _ "$MNT/a"
	run --separate-stderr rm "$MNT/a/d/f2"
	chmod 0755 "$d/root/a"
	assert_status 1
	[[ $stderr == *"Permission denied"* ]]
	[ -e "$d/root/a/d/f2" ]
	run grep -c "failed after the mount had answered it" "$WSFS_ERR"
	assert_eq "$output" 0 "unlinks answered then refused"
}
