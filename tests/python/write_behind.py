# SPDX-License-Identifier: Apache-2.0
"""Checks of wsfs's write-behind (fs.c): write(2) returns before agentd has
the bytes, so these look for what the writer or anyone else could see go
wrong. Usage: write_behind.py CHECK MNT ROOT [LOCAL]; prints what it found,
exits non-zero on a difference.

  enospc   ROOT is a 4 MiB tmpfs: 8 MiB written in 1 MiB writes must fail
           with ENOSPC at a write or at close (never report success), and
           the file, opened again, reads what the pod has (writes already
           on their way when one failed may have landed past it: the pod's
           file may be longer than 4 MiB, with a hole).
  follow   16 writes of 1 MiB, one after the other (all but the first
           written behind): after each, stat (by path and by fd) gives
           the new size and an O_DIRECT read (which reaches agentd) the new
           bytes; right after close, and after an fsync with the file still
           open, the pod has every byte.
  overlap  two handles of one file write 300 blocks of 128 KiB on where
           each left off, the second over the first's: the pod's file
           equals the same writes made on LOCAL.
  overlap_small  the same with 1,000 blocks of 4 KiB (gathered).
  gather   (extra argument: N) N files, each made in 10 writes of 4 KiB
           and one of 1,000 bytes: right after each close the pod has
           every byte (the caller counts agentd's Write calls).
  linger   a file written in 3 writes of 1,000 bytes and left open: the
           pod has them within 2 s (gathered writes wait 5 ms), and again
           after 3 more; the writer's stat gives the size meanwhile.
  cap      (mounted with a gather_ms far longer than the check) 400 files
           opened, then each written in one write of 200 KiB and left
           open: gathered writes hold at most 64 MiB of them
           (WSFS_GATHER_TOTAL_MAX), so the pod has most files whole while
           all are open (the write that would pass the cap sends every
           run first), and not all (the rest stay gathered); after the
           closes it has every byte.
  gather_eio  (extra argument: N) while every write of agentd fails (the
           caller injects EIO), N files made in 3 writes of 1,000 bytes
           each: each fails at close (or a write) with EIO, never
           succeeds; one more fails at fsync; each, opened again, reads
           what the pod has (nothing).
  retry    16 MiB in one write(2), the rest written again after each short
           count, as dd, cp and stdio do, while some of agentd's writes
           fail (the caller injects EIO): the writer must see an error
           (at a write or at close), or the pod must have every byte.
  others   16 writes of 1 MiB through one descriptor while some of
           agentd's writes fail (the caller injects EIO), another
           descriptor of the file open: once the writer got the error,
           fsync(2) of the other fails with EIO too.
  forked   three writes of 1 MiB (the third fails in agentd: the caller
           injects EIO into agentd's third pwrite64, one thread), then
           a child runs (fork, then exec closes the descriptor: a FLUSH
           of the same open file), then the writer's fsync(2) must fail
           with EIO: the child's close must not have taken the error.
  cached   a 2 MiB file made in the pod is read whole through the mount
           (its pages cached), then written over in 1 MiB writes, a
           stat between them, while agentd fails its second write (the
           caller injects EIO into agentd's second pwrite64): close fails
           with EIO, and a descriptor open all along reads what the pod
           has: the first new MiB and the second old one (the kernel's
           pages held the failed bytes, and with the size and mtime
           unchanged it had no reason to drop them).
  stall    (extra arguments: AGENTD_PID BOUND_S) with a file open and
           written, agentd is stopped (SIGSTOP); 64 more 1 MiB writes and
           the close must fail with EIO or ENOTCONN, the first failure
           and the end of the close within BOUND_S seconds of the stop.
           Leaves agentd stopped.
"""
import errno
import mmap
import os
import signal
import subprocess
import sys
import time

MiB = 1024 * 1024


def block(i, size=MiB):
    """size bytes that differ for every i (and at every 8-byte position)."""
    unit = (b"%07d\n" % i)
    return (unit * (size // len(unit) + 1))[:size]


def enospc(mnt, root):
    path = mnt + "/big"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    failed_at = None
    for i in range(8):
        try:
            os.write(fd, block(i))
        except OSError as e:
            failed_at = ("write %d" % i, e.errno)
            break
    try:
        os.close(fd)
        if failed_at is None:
            failed_at = ("nowhere", 0)
    except OSError as e:
        failed_at = failed_at or ("close", e.errno)
    print("ENOSPC reported at:", failed_at[0], errno.errorcode.get(failed_at[1]))
    if failed_at[1] != errno.ENOSPC:
        print("FAIL: 8 MiB into a 4 MiB workspace did not fail with ENOSPC")
        return 1
    with open(path, "rb") as f:
        seen = f.read()
    with open(root + "/big", "rb") as f:
        pod = f.read()
    print("mount reads %d bytes, the pod has %d" % (len(seen), len(pod)))
    if seen != pod:
        print("FAIL: the mount shows bytes the pod does not have")
        return 1
    return 0


def follow(mnt, root):
    path = mnt + "/f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    rfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, MiB)  # page-aligned, as O_DIRECT wants
    bad = 0
    for i in range(16):
        data = block(i)
        assert os.write(fd, data) == MiB
        want = (i + 1) * MiB
        for how, st in (("path", os.stat(path)), ("fd", os.fstat(fd))):
            if st.st_size != want:
                print("FAIL: after write %d, stat by %s says %d bytes, not %d"
                      % (i, how, st.st_size, want))
                bad += 1
        n = os.preadv(rfd, [buf], i * MiB)
        if n != MiB or buf[:] != data:
            print("FAIL: after write %d, an O_DIRECT read got %d bytes%s"
                  % (i, n, "" if n != MiB else ", not the ones written"))
            bad += 1
    os.close(rfd)
    os.close(fd)
    # Close-to-open: the pod has it all once close(2) returned.
    with open(root + "/f", "rb") as f:
        pod = f.read()
    if pod != b"".join(block(i) for i in range(16)):
        print("FAIL: right after close the pod has %d bytes, not all 16 MiB written"
              % len(pod))
        bad += 1
    # fsync(2), the file still open: the pod has it.
    fd = os.open(path, os.O_WRONLY)
    for i in range(8):
        os.pwrite(fd, block(100 + i), i * MiB)
    os.fsync(fd)
    with open(root + "/f", "rb") as f:
        pod = f.read(8 * MiB)
    os.close(fd)
    if pod != b"".join(block(100 + i) for i in range(8)):
        print("FAIL: after fsync the pod lacks bytes written before it")
        bad += 1
    print("%d problems" % bad)
    return 1 if bad else 0


def overlap(mnt, root, local, size=128 * 1024, count=300):
    # Two handles of one file, each writing on where it left off (so
    # written behind or gathered), the second over what the first just
    # wrote: its write must wait for the first's, or agentd may apply them
    # in the other order.
    fds = [[os.open(d + "/o", os.O_WRONLY | os.O_CREAT, 0o644) for _ in range(2)]
           for d in (mnt, local)]
    for i in range(count):
        for a, b in fds:
            assert os.pwrite(a, block(i, size), i * size) == size
            assert os.pwrite(b, block(1000 + i, size), i * size) == size
    for pair in fds:
        for fd in pair:
            os.close(fd)
    with open(root + "/o", "rb") as f:
        pod = f.read()
    with open(local + "/o", "rb") as f:
        want = f.read()
    if pod != want:
        first = next((k for k in range(min(len(pod), len(want))) if pod[k] != want[k]),
                     min(len(pod), len(want)))
        print("FAIL: the pod's file (%d bytes) differs from the local one (%d) at byte %d"
              % (len(pod), len(want), first))
        return 1
    print("the pod's file equals the local one (%d bytes)" % len(pod))
    return 0


def retry(mnt, root):
    data = b"".join(block(i) for i in range(16))
    fd = os.open(mnt + "/r", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done, counts = 0, []
    try:
        while done < len(data):
            n = os.write(fd, data[done:])
            counts.append(n)
            done += n
        os.close(fd)
    except OSError as e:
        print("error %s after write(2) counts %s" % (errno.errorcode.get(e.errno), counts))
        return 0
    with open(root + "/r", "rb") as f:
        pod = f.read()
    if pod != data:
        print("FAIL: write(2) counts %s and close(2) succeeded, but the pod's file differs"
              % counts)
        return 1
    print("no error, and the pod has every byte (counts %s)" % counts)
    return 0


def others(mnt, root):
    path = mnt + "/e"
    a = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    b = os.open(path, os.O_WRONLY)
    c = os.open(path, os.O_RDONLY)
    failed = None
    for i in range(16):
        try:
            os.write(a, block(i))
        except OSError as e:
            failed = "write %d: %s" % (i, errno.errorcode.get(e.errno))
            break
    if failed is None:
        try:
            os.fsync(a)
        except OSError as e:
            failed = "fsync: %s" % errno.errorcode.get(e.errno)
    if failed is None:
        print("no write failed (the injection missed): nothing to check")
        return 0
    print("the writer's descriptor failed at", failed)
    ok = False
    try:
        os.fsync(b)
        print("FAIL: fsync of the other descriptor succeeded")
    except OSError as e:
        print("fsync of the other descriptor: %s" % errno.errorcode.get(e.errno))
        ok = e.errno == errno.EIO
    finally:
        os.close(b)
        try:
            os.close(a)
        except OSError:
            pass
    # A reader open all along: the kernel's pages held what the writer
    # wrote, the failed bytes too; it must come to read what the pod has.
    give_up = time.monotonic() + 5
    while True:
        with open(root + "/e", "rb") as f:
            pod = f.read()
        seen = os.pread(c, 32 * MiB, 0)
        if seen == pod or time.monotonic() > give_up:
            break
        time.sleep(0.05)
    os.close(c)
    differ = [i for i in range(16) if seen[i * MiB:(i + 1) * MiB] != pod[i * MiB:(i + 1) * MiB]]
    print("reader open all along: %d bytes, the pod %d; MiBs that differ: %s" %
          (len(seen), len(pod), differ or "none"))
    return 0 if ok and not differ and len(seen) == len(pod) else 1


def forked(mnt, root):
    fd = os.open(mnt + "/fk", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(3):
            os.write(fd, block(i))
    except OSError as e:
        print("FAIL: a write failed (%s) before the child ran: nothing to check"
              % errno.errorcode.get(e.errno))
        return 1
    time.sleep(0.5)  # the third, written behind, has failed by now
    subprocess.run(["true"], check=True)
    try:
        os.fsync(fd)
        print("FAIL: the writer's fsync succeeded after its child's close;"
              " the pod has %d bytes of %d" % (os.path.getsize(root + "/fk"), 3 * MiB))
        bad = 1
    except OSError as e:
        print("the writer's fsync after its child's close: %s" % errno.errorcode.get(e.errno))
        bad = e.errno != errno.EIO
    try:
        os.close(fd)
    except OSError:
        pass
    return 1 if bad else 0


def cached(mnt, root):
    with open(root + "/o", "wb") as f:
        f.write(block(100) + block(101))
    c = os.open(mnt + "/o", os.O_RDONLY)
    if os.pread(c, 2 * MiB, 0) != block(100) + block(101):
        print("FAIL: the first read differs")
        return 1
    a = os.open(mnt + "/o", os.O_WRONLY)
    os.write(a, block(0))
    os.fstat(a)
    os.write(a, block(1))  # written behind; agentd fails it
    try:
        os.close(a)
        print("FAIL: close succeeded (the injection missed?)")
        return 1
    except OSError as e:
        print("close: %s" % errno.errorcode.get(e.errno))
    give_up = time.monotonic() + 5
    while True:
        seen = os.pread(c, 2 * MiB, 0)
        if seen == block(0) + block(101) or time.monotonic() > give_up:
            break
        time.sleep(0.05)
    os.close(c)
    with open(root + "/o", "rb") as f:
        pod = f.read()
    names = {block(0): "new", block(1): "new", block(100): "old", block(101): "old"}
    print("the pod has MiB 0 %s, MiB 1 %s; the reader sees MiB 0 %s, MiB 1 %s" % tuple(
        names.get(b[i * MiB:(i + 1) * MiB], "other") for b in (pod, seen) for i in (0, 1)))
    return 0 if pod == seen == block(0) + block(101) else 1


def stall(mnt, pid, bound):
    fd = os.open(mnt + "/s", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, block(0))
    os.fsync(fd)
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    failed = None
    for i in range(1, 65):
        try:
            os.write(fd, block(i))
        except OSError as e:
            failed = ("write %d" % i, e.errno, time.monotonic() - t0)
            break
    try:
        os.close(fd)
    except OSError as e:
        failed = failed or ("close", e.errno, time.monotonic() - t0)
    closed = time.monotonic() - t0
    if failed is None:
        print("FAIL: 64 MiB written and closed while agentd was stopped, no error")
        return 1
    what, e, secs = failed
    print("first failure: %s, %s, %.2f s after the stop; closed %.2f s after it"
          % (what, errno.errorcode.get(e), secs, closed))
    if e not in (errno.EIO, errno.ENOTCONN):
        print("FAIL: not EIO or ENOTCONN")
        return 1
    # Also the close: the writes behind in flight each have a deadline
    # that counts those ahead of them, and close(2) waited out the
    # longest (3 to 4 times rpc_timeout) before the link-stall rule.
    if secs > bound or closed > bound:
        print("FAIL: later than %s s" % bound)
        return 1
    return 0


def small_file(i):
    """What gather() writes into file i: 10 blocks of 4 KiB and 1,000 bytes."""
    return b"".join(block(i * 11 + k, 4096) for k in range(10)) + block(i * 11 + 10, 1000)


def gather(mnt, root, n):
    bad = 0
    for i in range(n):
        data = small_file(i)
        fd = os.open("%s/g%d" % (mnt, i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for k in range(0, len(data), 4096):
            assert os.write(fd, data[k:k + 4096]) == len(data[k:k + 4096])
        os.close(fd)
        with open("%s/g%d" % (root, i), "rb") as f:
            pod = f.read()
        if pod != data:
            print("FAIL: right after close the pod has %d bytes of g%d, not the %d written"
                  % (len(pod), i, len(data)))
            bad += 1
    print("%d files, %d problems" % (n, bad))
    return 1 if bad else 0


def pod_has(path, want, bound):
    """Seconds until the file at path holds want, or None after bound."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound:
        try:
            with open(path, "rb") as f:
                if f.read() == want:
                    return time.monotonic() - t0
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    return None


def linger(mnt, root):
    bad = 0
    fd = os.open(mnt + "/l", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    want = b""
    for step in range(2):
        for k in range(3):
            data = block(step * 3 + k, 1000)
            assert os.write(fd, data) == 1000
            want += data
        # Before any request that would send them (fstat: GETATTR).
        took = pod_has(root + "/l", want, 2.0)
        if took is None:
            print("FAIL: with the file open, the pod lacks the %d bytes written after 2 s"
                  % len(want))
            bad += 1
        else:
            print("with the file open, the pod had %d bytes after %.3f s" % (len(want), took))
        if os.fstat(fd).st_size != len(want):
            print("FAIL: the writer's fstat says %d bytes, not %d"
                  % (os.fstat(fd).st_size, len(want)))
            bad += 1
    os.close(fd)
    print("%d problems" % bad)
    return 1 if bad else 0


def cap(mnt, root, n=400, size=200 * 1024):
    bad = 0
    fds = [os.open("%s/c%d" % (mnt, i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
           for i in range(n)]
    # Writes only from here on: any other request would send the runs.
    for i, fd in enumerate(fds):
        assert os.write(fd, block(i, size)) == size
    whole = 0
    for i in range(n):
        with open("%s/c%d" % (root, i), "rb") as f:
            whole += f.read() == block(i, size)
    held = (n - whole) * size
    print("with all %d files open, the pod has %d whole; %d bytes (%.1f MiB) held"
          % (n, whole, held, held / MiB))
    if held > 64 * MiB:
        print("FAIL: more than 64 MiB of gathered writes held")
        bad += 1
    if whole == n:
        print("FAIL: nothing held: were the writes gathered at all?")
        bad += 1
    for fd in fds:
        os.close(fd)
    for i in range(n):
        with open("%s/c%d" % (root, i), "rb") as f:
            if f.read() != block(i, size):
                print("FAIL: after close, the pod's c%d is not what was written" % i)
                bad += 1
    print("%d problems" % bad)
    return 1 if bad else 0


def gather_eio(mnt, root, n):
    bad = 0
    for i in range(n + 1):
        path = "%s/e%d" % (mnt, i)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err, where = None, None
        try:
            for k in range(3):
                os.write(fd, block(k, 1000))
            if i == n:
                where = "fsync"
                os.fsync(fd)
        except OSError as e:
            err, where = e.errno, where or "write %d" % k
        try:
            os.close(fd)
        except OSError as e:
            err, where = err or e.errno, where if err else "close"
        if err != errno.EIO:
            print("FAIL: e%d: %s" % (i, "no error" if err is None
                                     else "%s at %s" % (errno.errorcode[err], where)))
            bad += 1
        else:
            print("e%d: %s: EIO" % (i, where))
        with open(path, "rb") as f:
            got = f.read()
        with open("%s/e%d" % (root, i), "rb") as f:
            pod = f.read()
        if got != pod:
            print("FAIL: e%d, opened again, reads %d bytes; the pod has %d"
                  % (i, len(got), len(pod)))
            bad += 1
    print("%d problems" % bad)
    return 1 if bad else 0


def main():
    check, mnt, root = sys.argv[1:4]
    if check == "enospc":
        return enospc(mnt, root)
    if check == "follow":
        return follow(mnt, root)
    if check == "overlap":
        return overlap(mnt, root, sys.argv[4])
    if check == "overlap_small":
        return overlap(mnt, root, sys.argv[4], 4096, 1000)
    if check == "gather":
        return gather(mnt, root, int(sys.argv[4]))
    if check == "linger":
        return linger(mnt, root)
    if check == "cap":
        return cap(mnt, root)
    if check == "gather_eio":
        return gather_eio(mnt, root, int(sys.argv[4]))
    if check == "retry":
        return retry(mnt, root)
    if check == "others":
        return others(mnt, root)
    if check == "forked":
        return forked(mnt, root)
    if check == "cached":
        return cached(mnt, root)
    if check == "stall":
        return stall(mnt, int(sys.argv[4]), float(sys.argv[5]))
    print("unknown check", check)
    return 2


if __name__ == "__main__":
    sys.exit(main())
