# SPDX-License-Identifier: Apache-2.0
"""Chunk reads (fusefs/fs.c "Chunk reads") on a wsfs mount: small reads at
random places fetch the chunk around them into the page cache; what any
read gives must still be the file's bytes.

Usage:
  chunk_reads.py make FILE MIB VERSION   write FILE (MIB MiB, a pattern
                                         of VERSION), in place if it exists
  chunk_reads.py rewrite FILE N          make FILE anew in place N times,
                                         versions 2..N+1 (the pod's side)
  chunk_reads.py random FILE REF N       N 4 KiB reads of FILE at distinct
                                         random blocks, then 8 KiB across
                                         each 64 KiB boundary, each
                                         compared with REF's bytes
  chunk_reads.py reader FILE SECONDS     4 KiB reads of FILE at random
                                         places for SECONDS (no checks)
  chunk_reads.py same FILE REF           FILE reads as REF, byte for byte
  chunk_reads.py own FILE                random reads through a descriptor
                                         held open, then a write (while
                                         another process reads at random)
                                         and a truncate through the mount:
                                         what it reads after each is what
                                         was done
Exit status 0 when every check held, 1 with the first that did not."""
import os
import random
import sys
import time

BLOCK = 4096


def pattern(mib, version):
    """MIB MiB whose every 4 KiB block names its version and index."""
    out = bytearray()
    for i in range(mib * 1024 * 1024 // BLOCK):
        head = b"v%08d b%08d " % (version, i)
        out += head + bytes([(version * 7 + i) % 251]) * (BLOCK - len(head))
    return bytes(out)


def write_in_place(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def fail(msg):
    print(msg)
    sys.exit(1)


def cmd_make(path, mib, version):
    write_in_place(path, pattern(int(mib), int(version)))


def cmd_rewrite(path, n):
    mib = os.stat(path).st_size // (1024 * 1024)
    for v in range(2, int(n) + 2):
        write_in_place(path, pattern(mib, v))


def cmd_random(path, ref, n):
    fd, rfd = os.open(path, os.O_RDONLY), os.open(ref, os.O_RDONLY)
    blocks = os.fstat(rfd).st_size // BLOCK
    for i, b in enumerate(random.sample(range(blocks), int(n))):
        got, want = os.pread(fd, BLOCK, b * BLOCK), os.pread(rfd, BLOCK, b * BLOCK)
        if got != want:
            fail("read %d, block %d: %r, the pod has %r" % (i, b, got[:20], want[:20]))
    # 8 KiB across each 64 KiB boundary (a chunk's end, for any chunk size):
    # from the last one down, so that none follows the one before.
    for at in range((blocks * BLOCK // 65536) * 65536 - BLOCK, 0, -65536):
        got, want = os.pread(fd, 2 * BLOCK, at), os.pread(rfd, 2 * BLOCK, at)
        if got != want:
            fail("8 KiB at %d: %r, the pod has %r" % (at, got[:20], want[:20]))
    print("%s reads: the pod's bytes" % n)


def cmd_reader(path, seconds):
    fd = os.open(path, os.O_RDONLY)
    end, n = time.monotonic() + float(seconds), 0
    while time.monotonic() < end:
        blocks = max(os.fstat(fd).st_size // BLOCK, 1)
        os.pread(fd, BLOCK, random.randrange(blocks) * BLOCK)
        n += 1
    print("%d reads" % n)


def cmd_same(path, ref):
    with open(path, "rb") as f, open(ref, "rb") as r:
        got, want = f.read(), r.read()
    if got == want:
        return
    for b in range(0, max(len(got), len(want)), BLOCK):
        if got[b:b + BLOCK] != want[b:b + BLOCK]:
            fail("block %d: %r, the pod has %r (sizes %d, %d)"
                 % (b // BLOCK, got[b:b + 20], want[b:b + 20], len(got), len(want)))


def cmd_own(path):
    mib = 4
    held = os.open(path, os.O_RDONLY)
    blocks = mib * 1024 * 1024 // BLOCK
    for b in random.sample(range(blocks), 300):
        os.pread(held, BLOCK, b * BLOCK)
    # A write through the mount, by another descriptor, over every block
    # in random order, while another process reads at random places.
    new = pattern(mib, 99)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.set_blocking(r, False)
        fd = os.open(path, os.O_RDONLY)
        while True:
            os.pread(fd, BLOCK, random.randrange(blocks) * BLOCK)
            try:
                if os.read(r, 1) == b"":
                    os._exit(0)
            except BlockingIOError:
                pass
    os.close(r)
    fd = os.open(path, os.O_WRONLY)
    for b in random.sample(range(blocks), blocks):
        os.pwrite(fd, new[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
    os.close(fd)
    os.close(w)
    os.waitpid(pid, 0)
    for b in random.sample(range(blocks), 300) + list(range(blocks)):
        got = os.pread(held, BLOCK, b * BLOCK)
        if got != new[b * BLOCK:(b + 1) * BLOCK]:
            fail("after the write, block %d reads %r" % (b, got[:20]))
    # A truncate by path, then reads at random places below the new end.
    size = 1024 * 1024 + 100
    os.truncate(path, size)
    for b in random.sample(range(size // BLOCK + 1), 200):
        got = os.pread(held, BLOCK, b * BLOCK)
        if got != new[b * BLOCK:min((b + 1) * BLOCK, size)]:
            fail("after the truncate, block %d reads %r" % (b, got[:20]))
    time.sleep(0.2)  # chunks stored after the reads have landed
    for what, st in (("fstat", os.fstat(held)), ("stat", os.stat(path))):
        if st.st_size != size:
            fail("after the truncate, %s gives %d bytes, want %d" % (what, st.st_size, size))
    if os.pread(held, BLOCK, 2 * 1024 * 1024) != b"":
        fail("after the truncate, a read past the end gives bytes")
    print("write and truncate: read back as done")


def main():
    cmds = {"make": cmd_make, "rewrite": cmd_rewrite, "random": cmd_random,
            "reader": cmd_reader, "same": cmd_same, "own": cmd_own}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        fail(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
