# SPDX-License-Identifier: Apache-2.0
"""Checks of wsfs's setattr-behind (fs.c "Setattr-behind"): a chmod,
chown or utimes of a file the mount created and holds open for writing
returns before agentd has it. Usage: setattr_behind.py CHECK MNT ROOT N;
prints what it found, exits non-zero on a difference.

  order  N files, each created, written, then (as tar -p does) its times
         set, chown'ed to its own owner and chmod'ed, with more changes
         mixed in: a write after the times (which must set mtime anew), a
         chmod, times and chmod again (the last must win). fstat on the
         mount shows each change at once; right after close the pod's file
         has the mode, owner, size and mtime the mount showed.
  closed N files each created, written and closed, then chmod'ed and
         their times set by name (install(1)): the pod has both as soon
         as each call returned (nothing is kept behind after close).
  eio    N files created, written and chmod'ed 0600 (every other one
         after setting its times, so that the change goes with the write)
         while agentd fails every fchmod(2) (the caller injects EIO): a
         chmod kept behind returns and close fails with EIO ("eN: close:
         EIO"), the pod's mode unchanged; one sent at once (by path: not
         fchmod) succeeds; either way the mount then shows the pod's mode.
  tar    N files created, written in 3 writes, then (as tar -p does, with
         no stat between) their times set, chown'ed to their owner and
         chmod'ed: right after close the pod has the bytes, mode and mtime
         (the caller counts agentd's calls).
"""
import errno
import os
import stat
import sys

T1 = 1000000000123456789   # 2001-09-09, nanoseconds
T2 = 1100000000987654321   # 2004-11-09


def shown(st):
    return (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns)


def order(mnt, root, n):
    bad = 0
    for i in range(n):
        name = "f%d" % i
        fd = os.open(os.path.join(mnt, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"x" * (100 + i))
        st = os.fstat(fd)
        if i % 3 == 0:
            # tar -p: times, owner, mode.
            os.utime(fd, ns=(T1, T1))
            os.fchown(fd, st.st_uid, st.st_gid)
            os.fchmod(fd, 0o640)
            want = (0o640, st.st_uid, st.st_gid, 100 + i, T1)
        elif i % 3 == 1:
            # A write after the times: mtime is the write's, not T1.
            os.utime(fd, ns=(T1, T1))
            os.fchmod(fd, 0o600)
            os.write(fd, b"y")
            want = (0o600, st.st_uid, st.st_gid, 101 + i, None)
        else:
            # Changes over changes: the last of each wins.
            os.fchmod(fd, 0o600)
            os.utime(fd, ns=(T1, T1))
            os.fchmod(fd, 0o664)
            os.utime(fd, ns=(T2, T2))
            want = (0o664, st.st_uid, st.st_gid, 100 + i, T2)
        got = shown(os.fstat(fd))
        os.close(fd)
        pod = shown(os.lstat(os.path.join(root, name)))
        after = shown(os.stat(os.path.join(mnt, name)))
        for what, v in (("mount before close", got), ("pod after close", pod)):
            if v[:4] != want[:4] or (want[4] is not None and v[4] != want[4]):
                print("%s: %s: %r, want %r" % (name, what, v, want))
                bad += 1
        if want[4] is None and pod[4] == T1:
            print("%s: the write after utime left mtime at T1 in the pod" % name)
            bad += 1
        if after != pod:
            print("%s: mount after close %r, pod %r" % (name, after, pod))
            bad += 1
    print("order: %d files, %d differences" % (n, bad))
    return 1 if bad else 0


def closed(mnt, root, n):
    bad = 0
    for i in range(n):
        name = "c%d" % i
        with open(os.path.join(mnt, name), "wb") as f:
            f.write(b"x\n")
        # install(1), `cat > f; chmod +x f`: by name, after close(2).
        os.chmod(os.path.join(mnt, name), 0o751)
        os.utime(os.path.join(mnt, name), ns=(T1, T1))
        pod = os.lstat(os.path.join(root, name))
        if stat.S_IMODE(pod.st_mode) != 0o751 or pod.st_mtime_ns != T1:
            print("%s: the pod has mode %o mtime %d right after chmod and utime returned"
                  % (name, stat.S_IMODE(pod.st_mode), pod.st_mtime_ns))
            bad += 1
    print("closed: %d files, %d differences" % (n, bad))
    return 1 if bad else 0


def eio(mnt, root, n):
    bad = 0
    for i in range(n):
        name = "e%d" % i
        fd = os.open(os.path.join(mnt, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"data\n")
        try:
            if i % 2:
                os.utime(fd, ns=(T1, T1))
            os.fchmod(fd, 0o600)
        except OSError as e:
            # Not kept behind (the mount did not know the attributes):
            # agentd's error comes at once.
            print("%s: fchmod: %s" % (name, errno.errorcode[e.errno]))
            os.close(fd)
            if e.errno != errno.EIO:
                bad += 1
            continue
        try:
            os.close(fd)
            want = 0o600  # sent at once, by path (not fchmod in agentd)
        except OSError as e:
            print("%s: close: %s" % (name, errno.errorcode[e.errno]))
            want = 0o644
            if e.errno != errno.EIO:
                bad += 1
        pod = stat.S_IMODE(os.lstat(os.path.join(root, name)).st_mode)
        mnt_mode = stat.S_IMODE(os.stat(os.path.join(mnt, name)).st_mode)
        if pod != want or mnt_mode != pod:
            print("%s: pod mode %o, mount %o; want %o both" % (name, pod, mnt_mode, want))
            bad += 1
    print("eio: %d files, %d differences" % (n, bad))
    return 1 if bad else 0


def tar(mnt, root, n):
    bad = 0
    for i in range(n):
        name = "t%d" % i
        data = (b"%06d" % i) * 2000
        fd = os.open(os.path.join(mnt, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        for k in range(0, len(data), 5000):
            os.write(fd, data[k:k + 5000])
        os.utime(fd, ns=(T1, T1 + i))
        os.fchown(fd, os.getuid(), os.getgid())
        os.fchmod(fd, 0o640)
        os.close(fd)
        st = os.lstat(os.path.join(root, name))
        with open(os.path.join(root, name), "rb") as f:
            pod = f.read()
        if (pod, stat.S_IMODE(st.st_mode), st.st_mtime_ns) != (data, 0o640, T1 + i):
            print("%s: the pod has %d bytes, mode %o, mtime %d; want %d, 640, %d"
                  % (name, len(pod), stat.S_IMODE(st.st_mode), st.st_mtime_ns, len(data),
                     T1 + i))
            bad += 1
    print("tar: %d files, %d differences" % (n, bad))
    return 1 if bad else 0


def main():
    check, mnt, root, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if check == "order":
        return order(mnt, root, n)
    if check == "eio":
        return eio(mnt, root, n)
    if check == "tar":
        return tar(mnt, root, n)
    if check == "closed":
        return closed(mnt, root, n)
    print("unknown check", check)
    return 2


if __name__ == "__main__":
    sys.exit(main())
