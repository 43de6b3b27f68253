# SPDX-License-Identifier: Apache-2.0
"""A file the pod replaces by rename every 2 ms (a build rewriting its
output, git's index.lock) while a host process opens it and reads it whole:
fstat's size must be the size of the bytes the descriptor reads, and a
mmap(2) of that size must read them. An open that raced two of the pod's
renames got the new file on the old file's kernel inode, with the old size:
reads of another size, and SIGBUS past the new file's end.

With MODE "rewrite" the pod removes the file and writes a new one under the
name in place (one write(2), no pause) instead: a host open may get it while
it is written, so the bytes read may outgrow fstat's size but never fall
short of it, and a mmap(2) of that size reads them. A GETATTR reply whose
attributes the kernel dropped (a watch invalidation crossed it) left i_size
short of the size fstat(2) gave: mmap(2) died of SIGBUS; the bytes Open
brought along, of the empty file it found, answered the first read: reads
of 0 bytes; and the VFS's one retry of an open told ESTALE (the name held
another file) lost to the pod: open(2) failed with ESTALE. Either mode: an
open never fails with ESTALE, nor with ENOENT while the pod renames.

With OPENERS > 0, that many more host processes open and close the file
in a loop meanwhile: an open whose VFS retry lost to the pod again got the
new file on the kernel inode of the file the reader had open, and gave the
inode the new file's size: the reader's read(2) went on past its file's
end, into zeros (8192 bytes of a 5001-byte file); and an open failed
ENOENT ("gone", counted apart) when the VFS's repeat of it came to a node
that had lost its name and another process's repeat had taken the node's
pin (1 to 4 in a thousand opens with two openers), where rename(2) never
leaves the name missing.

Usage: pod_replace_read.py VIEW POD SECONDS [PERIOD_MS [MODE [OPENERS]]];
PERIOD_MS: the pause between the pod's renames (2); MODE: rename (the
default) or rewrite. Prints the count of opens and of those that differ
(and, with rewrite, read short) or failed ESTALE (and, with OPENERS,
ENOENT: "gone"); exits 1 when any but the gone did, or when fewer than 50
opens were made.
"""
import errno
import mmap
import os
import subprocess
import sys
import time

VIEW, POD, SECONDS = sys.argv[1], sys.argv[2], sys.argv[3]
PERIOD = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.002
REWRITE = len(sys.argv) > 5 and sys.argv[5] == "rewrite"
OPENERS = int(sys.argv[6]) if len(sys.argv) > 6 else 0
OPENER = r"""
import os, sys
p = os.path.join(sys.argv[1], "h")
while os.getppid() == int(sys.argv[2]):
    try:
        os.close(os.open(p, os.O_RDONLY))
    except OSError:
        pass
"""
RENAMER = r"""
import os, sys, time
d, end, period = sys.argv[1], time.monotonic() + float(sys.argv[2]), float(sys.argv[3])
i = 0
while time.monotonic() < end:
    n = 100 + (i * 7919) % 30000
    with open(os.path.join(d, "h.tmp"), "w") as f:
        f.write("%08d" % n + "x" * (n - 8))
    os.rename(os.path.join(d, "h.tmp"), os.path.join(d, "h"))
    i += 1
    time.sleep(period)
"""
REWRITER = r"""
import os, sys, time
p, end = os.path.join(sys.argv[1], "h"), time.monotonic() + float(sys.argv[2])
i = 0
while time.monotonic() < end:
    n = 100 + (i * 7919) % 30000
    os.unlink(p)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"%08d" % n + b"x" * (n - 8))
    os.close(fd)
    i += 1
"""

with open(os.path.join(POD, "h"), "w") as f:
    f.write("%08d" % 100 + "x" * 92)
time.sleep(0.3)
pod = subprocess.Popen([sys.executable, "-c", REWRITER if REWRITE else RENAMER, POD, SECONDS,
                        str(PERIOD)])
openers = [subprocess.Popen([sys.executable, "-c", OPENER, VIEW, str(os.getpid())])
           for _ in range(OPENERS)]
opens = bad = short = stale = gone = 0
while pod.poll() is None:
    try:
        fd = os.open(os.path.join(VIEW, "h"), os.O_RDONLY)
    except FileNotFoundError:
        if REWRITE:
            continue  # the pod removed it a moment ago
        # rename(2) replaces the name at once: never missing
        if OPENERS:
            gone += 1
        else:
            bad += 1
            if bad <= 3:
                print("ENOENT")
        continue
    except OSError as e:
        if e.errno != errno.ESTALE:
            raise
        stale += 1  # no answer open(2) gives on a local disk
        continue
    try:
        size = os.fstat(fd).st_size
        if REWRITE and size == 0:
            continue  # made, not yet written
        data = b""
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            data += b
        m = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ)
        mapped = m[:]
        m.close()
        opens += 1
        if REWRITE and len(data) < size:
            short += 1
            if short <= 3:
                print("fstat %d, read %d bytes" % (size, len(data)))
        elif REWRITE:
            if mapped != data[:size] or (len(data) >= 8 and int(data[:8]) < len(data)):
                bad += 1
                if bad <= 3:
                    print("fstat %d, mmap'd bytes differ from the %d read" % (size, len(data)))
        elif len(data) != size or mapped != data or int(data[:8]) != size:
            bad += 1
            if bad <= 3:
                print("fstat %d, read %d bytes of a %s-byte file" % (size, len(data), data[:8]))
    except (OSError, ValueError) as e:
        bad += 1
        if bad <= 3:
            print("fails:", e)
    finally:
        os.close(fd)
for o in openers:
    o.kill()
    o.wait()
if REWRITE:
    print("%d opens, %d differ, %d read short, %d ESTALE" % (opens, bad, short, stale))
elif OPENERS:
    print("%d opens, %d differ, %d ESTALE, %d gone" % (opens, bad, stale, gone))
else:
    print("%d opens, %d differ, %d ESTALE" % (opens, bad, stale))
# At least 50 opens, or the loop proved little (73 in 4 s under ASan on a
# loaded machine, hundreds here).
sys.exit(1 if bad or short or stale or opens < 50 else 0)
