# SPDX-License-Identifier: Apache-2.0
"""A host process's cwd and open files while the POD removes, renames or
replaces them: run once on a wsfs mount (VIEW = the mount, POD = agentd's
root) and once on a local directory (VIEW = POD), and print what each step
did; the two outputs must be the same. Each line names what a local disk
does; a step whose errno may differ prints only whether it failed.

Usage: pod_renames.py VIEW POD SETTLE_SECONDS [BEFORE_SECONDS]
BEFORE_SECONDS (default SETTLE_SECONDS) is the pause between the host's
step (a chdir, an open) and the pod's change: a short one has the event
come while the mount's lookup is recent (wsfs watch.c bound_lately()).
"""
import ctypes
import os
import sys
import time

VIEW, POD, SETTLE = sys.argv[1], sys.argv[2], float(sys.argv[3])
BEFORE = float(sys.argv[4]) if len(sys.argv) > 4 else SETTLE


def settle():
    """Let the events of what came before reach the mount: the pod's, and
    the echoes of the mount's own (a rename that agentd sees in one batch
    with the create before it reaches the mount as a create of the new
    name)."""
    time.sleep(SETTLE)


def pause():
    """Between the host's step and the pod's change."""
    time.sleep(BEFORE)


def attempt(what, fn):
    try:
        r = fn()
        print(what, "ok" if r is None else r)
    except OSError:
        print(what, "fails")


def v(*p):
    return os.path.join(VIEW, *p)


def p(*q):
    return os.path.join(POD, *q)


home = os.getcwd()

# A cwd the pod removes and makes anew: the process is in the removed one.
os.makedirs(v("a", "build"))
with open(v("a", "build", "old.o"), "w"):
    pass
os.chdir(v("a", "build"))
pause()
os.unlink(p("a", "build", "old.o"))
os.rmdir(p("a", "build"))
os.mkdir(p("a", "build"))
with open(p("a", "build", "new.o"), "w"):
    pass
settle()
try:  # (a local disk lists nothing; wsfs fails ESTALE: README)
    shows = "new.o" in os.listdir(".")
except OSError:
    shows = False
print("A: the new directory's file shows in the old cwd:", shows)
attempt("A: create in the old cwd:", lambda: open("mine", "w").close())
print("A: the pod's new directory got it:", os.path.exists(p("a", "build", "mine")))
os.chdir(home)

# A cwd the pod renames: the process stays in it, under its new name.
os.makedirs(v("b", "d1"))
os.chdir(v("b", "d1"))
pause()
os.rename(p("b", "d1"), p("b", "d2"))
settle()
attempt("B: create in the renamed cwd:", lambda: open("c", "w").close())
attempt("B: list it:", lambda: sorted(os.listdir(".")))
print("B: the pod has it under the new name:", os.path.exists(p("b", "d2", "c")))
os.mkdir(p("b", "d1"))  # and a new d1 gets nothing of it
settle()
attempt("B: create again:", lambda: open("c2", "w").close())
print("B: the new d1 stays empty:", os.listdir(p("b", "d1")) == [])

# A cwd whose parent the pod renames.
os.makedirs(v("c", "p", "d"))
os.chdir(v("c", "p", "d"))
pause()
os.rename(p("c", "p"), p("c", "q"))
settle()
attempt("C: create below the renamed parent:", lambda: open("x", "w").close())
print("C: the pod has it:", os.path.exists(p("c", "q", "d", "x")))
attempt("C: getcwd:", lambda: os.path.basename(os.getcwd()))
os.chdir(home)

# An open file the pod replaces by rename(2): calls on the descriptor
# reach the old file, never the new one.
os.makedirs(v("o"))
with open(v("o", "f"), "w") as f:
    f.write("old")
os.chmod(v("o", "f"), 0o644)
fd = os.open(v("o", "f"), os.O_RDWR)
pause()
with open(p("o", "g"), "w") as f:
    f.write("new")
os.chmod(p("o", "g"), 0o644)
os.rename(p("o", "g"), p("o", "f"))
settle()
attempt("D: fchmod:", lambda: os.fchmod(fd, 0o604))
attempt("D: futimens:", lambda: os.utime(fd, (5, 5)))
attempt("D: reads through /proc/self/fd:",
        lambda: open("/proc/self/fd/%d" % fd).read())
attempt("D: truncate through /proc/self/fd:",
        lambda: os.truncate("/proc/self/fd/%d" % fd, 2))
attempt("D: fstat:", lambda: "%o %d" % (os.fstat(fd).st_mode & 0o777, os.fstat(fd).st_size))
st = os.stat(p("o", "f"))
print("D: the pod's new file:", "%o" % (st.st_mode & 0o777), st.st_mtime != 5,
      open(p("o", "f")).read())
os.close(fd)

# An open file the pod renames: calls on the descriptor still work.
os.makedirs(v("e"))
with open(v("e", "f"), "w") as f:
    f.write("data")
fd = os.open(v("e", "f"), os.O_RDONLY)
pause()
os.rename(p("e", "f"), p("e", "f2"))
settle()
attempt("E: fchmod:", lambda: os.fchmod(fd, 0o600))
attempt("E: reopen through /proc/self/fd:",
        lambda: open("/proc/self/fd/%d" % fd).read())
print("E: the pod's renamed file:", "%o" % (os.stat(p("e", "f2")).st_mode & 0o777))
os.close(fd)

# Two directories the pod exchanges (renameat2 RENAME_EXCHANGE): the cwd and
# an open directory each stay with their own.
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs(v("x", "a"))
os.makedirs(v("x", "b"))
open(v("x", "a", "fa"), "w").close()
open(v("x", "b", "fb"), "w").close()
os.chdir(v("x", "a"))
dfd = os.open(v("x", "b"), os.O_RDONLY | os.O_DIRECTORY)
pause()
if libc.renameat2(-100, p("x", "a").encode(), -100, p("x", "b").encode(), 2) != 0:
    sys.exit("renameat2: errno %d" % ctypes.get_errno())
settle()
attempt("F: the cwd (was a) lists:", lambda: sorted(os.listdir(".")))
attempt("F: the open directory (was b) lists:", lambda: sorted(os.listdir(dfd)))
attempt("F: create in the cwd:", lambda: open("mine", "w").close())
print("F: it is in the pod's x/b:", os.path.exists(p("x", "b", "mine")))
os.close(dfd)
os.chdir(home)

# A cwd the pod renames, its new name looked up on the mount before the
# rename's event came; then the pod makes the old name anew.
os.makedirs(p("y", "d"))
open(p("y", "d", "old"), "w").close()
settle()
os.chdir(v("y", "d"))
pause()
os.rename(p("y", "d"), p("y", "e"))
for i in range(1000):
    try:
        os.stat(v("y", "e"))
        break
    except FileNotFoundError:
        pass
settle()
os.mkdir(p("y", "d"))
open(p("y", "d", "new"), "w").close()
settle()
attempt("G: the cwd lists:", lambda: sorted(os.listdir(".")))
attempt("G: create in the cwd:", lambda: open("mine", "w").close())
print("G: it is in the pod's y/e:", os.path.exists(p("y", "e", "mine")))
os.chdir(home)
