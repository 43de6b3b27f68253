# SPDX-License-Identifier: Apache-2.0
"""Every path-taking RPC stays inside the workspace root.

The layout (made here, under $WSB_BOX, whose "root" agentd serves):

  BOX/outside/            the sentinel: must be unchanged after every test
      secret.txt          with xattr user.tag
      sub/inner.txt
      empty/              (what an Rmdir would remove)
      lnk -> secret.txt   (what a Readlink would read)
  BOX/root/               the workspace
      file.txt  dir/  app/
      up -> ../outside            relative symlink climbing out
      abs -> BOX/outside          absolute symlink
      secretlink -> ../outside/secret.txt
      abssecret -> BOX/outside/secret.txt
      dangling -> ../outside/made_by_dangling        (does not exist)
      danglingabs -> BOX/outside/made_by_danglingabs (does not exist)
      dir/up2 -> ../../outside
      dir/rootlink -> ..          (the root itself: fine, but rootlink/.. is not)

Each attempt must fail with PERMISSION_DENIED (and, for wsbridge.v1, the
errno name EXDEV in the "wsbridge-errno" trailer), no Exec may start a
process, and after each test BOX holds only root/ and outside/, with outside/
unchanged: the same entries, types, modes, owners, link counts, sizes, mtimes,
content checksums, symlink targets and xattrs.

Run by tests/integration/escapes.bats; needs WSB_TARGET, WSB_BOX.
"""
import hashlib
import os
import stat
import sys
import unittest

import grpc

import wsbtest
from wsbtest import describe, devagent_pb2, devagent_pb2_grpc, pb, pbg, trailer

TIMEOUT = wsbtest.TIMEOUT
BOX = os.path.realpath(wsbtest.env("WSB_BOX"))
ROOT = os.path.join(BOX, "root")
OUT = os.path.join(BOX, "outside")

# Directory paths (as the wire carries them) that all name OUT or climb above
# the root: ".." components, relative and absolute symlinks, mixtures.
ESCAPE_DIRS = [
    b"../outside",
    b"/../outside",
    b"dir/../../outside",
    b"up",
    b"abs",
    b"dir/up2",
    b"dir/rootlink/../outside",
    b"./up",
]
# The same, but whose last component is a real directory (not a symlink): for
# the calls that act on a final symlink itself instead of following it.
ESCAPE_REAL_DIRS = [d for d in ESCAPE_DIRS if d.endswith(b"outside")]
# Final-component symlinks to a file outside (followed where the call follows).
ESCAPE_FILE_LINKS = [b"secretlink", b"abssecret"]


def build_layout():
    os.makedirs(os.path.join(OUT, "sub"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "empty"), exist_ok=True)
    with open(os.path.join(OUT, "secret.txt"), "w") as f:
        f.write("TOP SECRET\n")
    with open(os.path.join(OUT, "sub", "inner.txt"), "w") as f:
        f.write("inner\n")
    os.setxattr(os.path.join(OUT, "secret.txt"), "user.tag", b"v1")
    os.symlink("secret.txt", os.path.join(OUT, "lnk"))
    # What ExecuteCommands(load_from_file) would run if app_name got out.
    with open(os.path.join(OUT, "commands.txt"), "w") as f:
        f.write("touch %s\n" % os.path.join(BOX, "ran_from_outside_commands_txt"))
    # Old, distinct mtimes, so a rewrite with the same content still shows.
    for rel in ("secret.txt", "sub/inner.txt", "sub", "empty"):
        os.utime(os.path.join(OUT, rel), ns=(1_000_000_000, 1_000_000_000))

    os.makedirs(os.path.join(ROOT, "dir"), exist_ok=True)
    os.makedirs(os.path.join(ROOT, "app"), exist_ok=True)
    with open(os.path.join(ROOT, "file.txt"), "w") as f:
        f.write("inside\n")
    restore_links()


LINKS = {
    "up": "../outside",
    "abs": OUT,
    "secretlink": "../outside/secret.txt",
    "abssecret": os.path.join(OUT, "secret.txt"),
    "dangling": "../outside/made_by_dangling",
    "danglingabs": os.path.join(OUT, "made_by_danglingabs"),
    "dir/up2": "../../outside",
    "dir/rootlink": "..",
}


def restore_links():
    """(Re)make the symlinks of the layout inside the root."""
    for name, target in LINKS.items():
        p = os.path.join(ROOT, name)
        if os.path.islink(p) or os.path.isfile(p):
            os.unlink(p)
        os.symlink(target, p)


def snapshot():
    """Everything observable about OUT, plus the names directly in BOX."""
    snap = {"BOX": sorted(os.listdir(BOX))}
    for dirpath, dirnames, filenames in os.walk(OUT):
        for name in [""] + dirnames + filenames:
            p = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(p)
            entry = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid,
                     st.st_gid, st.st_nlink, st.st_size, st.st_mtime_ns, st.st_ino)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    entry += (hashlib.sha256(f.read()).hexdigest(),)
            if stat.S_ISLNK(st.st_mode):
                entry += (os.readlink(p),)
            else:
                entry += (tuple(sorted(
                    (n, os.getxattr(p, n, follow_symlinks=False))
                    for n in os.listxattr(p, follow_symlinks=False))),)
            snap[os.path.relpath(p, OUT)] = entry
    return snap


class EscapeTest(unittest.TestCase):
    """Base: a channel, stubs, the expected-denial check, the sentinel check."""

    @classmethod
    def setUpClass(cls):
        cls.ch = wsbtest.channel()
        cls.ws = pbg.WorkspaceStub(cls.ch)
        cls.ex = pbg.ExecStub(cls.ch)
        cls.da = devagent_pb2_grpc.ManageAgentOpsStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()

    def setUp(self):
        self.before = snapshot()

    def tearDown(self):
        after = snapshot()
        if after != self.before:
            diff = []
            for k in sorted(set(after) | set(self.before)):
                if after.get(k) != self.before.get(k):
                    diff.append("  %s: %r -> %r" % (k, self.before.get(k), after.get(k)))
            self.fail("outside the root changed:\n" + "\n".join(diff))

    checked = 0

    def denied(self, label, fn, errno_trailer=True):
        """fn() must raise RpcError PERMISSION_DENIED (with EXDEV)."""
        EscapeTest.checked += 1
        with self.subTest(label):
            try:
                r = fn()
            except grpc.RpcError as e:
                self.assertEqual(
                    e.code(), grpc.StatusCode.PERMISSION_DENIED,
                    "%s: expected PERMISSION_DENIED, got %s" % (label, describe(e)))
                if errno_trailer:
                    self.assertEqual(trailer(e), "EXDEV",
                                     "%s: wsbridge-errno of %s" % (label, describe(e)))
                return
            self.fail("%s: succeeded (%r) instead of PERMISSION_DENIED" % (label, r))


def files_in(dirs, name):
    return [d + b"/" + name for d in dirs]


class Workspace(EscapeTest):
    def test_stat(self):
        for d in ESCAPE_DIRS:
            self.denied("Stat follow %r" % d,
                        lambda: self.ws.Stat(pb.StatRequest(path=d, follow=True), timeout=TIMEOUT))
            for follow in (False, True):
                p = d + b"/secret.txt"
                self.denied("Stat follow=%s %r" % (follow, p),
                            lambda: self.ws.Stat(pb.StatRequest(path=p, follow=follow),
                                                 timeout=TIMEOUT))
        for p in ESCAPE_FILE_LINKS:
            self.denied("Stat follow %r" % p,
                        lambda: self.ws.Stat(pb.StatRequest(path=p, follow=True), timeout=TIMEOUT))
        for follow in (False, True):
            for p in (b"..", b"/..", b"dir/../.."):
                self.denied("Stat follow=%s %r" % (follow, p),
                            lambda: self.ws.Stat(pb.StatRequest(path=p, follow=follow),
                                                 timeout=TIMEOUT))

    def test_readdir(self):
        for d in ESCAPE_DIRS + [b"..", b"dir/rootlink/.."]:
            self.denied("ReadDir %r" % d,
                        lambda: self.ws.ReadDir(pb.ReadDirRequest(path=d), timeout=TIMEOUT))

    def test_open(self):
        A = pb.Access
        for p in files_in(ESCAPE_DIRS, b"secret.txt") + ESCAPE_FILE_LINKS:
            self.denied("Open RDONLY %r" % p,
                        lambda: self.ws.Open(pb.OpenRequest(path=p, access=A.RDONLY),
                                             timeout=TIMEOUT))
            self.denied("Open RDWR|O_TRUNC %r" % p,
                        lambda: self.ws.Open(pb.OpenRequest(path=p, access=A.RDWR, truncate=True),
                                             timeout=TIMEOUT))
        for p in files_in(ESCAPE_DIRS, b"created.txt"):
            self.denied("Open O_CREAT %r" % p,
                        lambda: self.ws.Open(pb.OpenRequest(path=p, access=A.WRONLY, create=True,
                                                            mode=0o644), timeout=TIMEOUT))
        for p in (b"dangling", b"danglingabs"):
            self.denied("Open O_CREAT through dangling symlink %r" % p,
                        lambda: self.ws.Open(pb.OpenRequest(path=p, access=A.WRONLY, create=True,
                                                            mode=0o644), timeout=TIMEOUT))
            self.denied("Open O_CREAT|O_TRUNC RDWR through dangling symlink %r" % p,
                        lambda: self.ws.Open(pb.OpenRequest(path=p, access=A.RDWR, create=True,
                                                            truncate=True, mode=0o600),
                                             timeout=TIMEOUT))
        for d in ESCAPE_DIRS:
            self.denied("Open O_DIRECTORY %r" % d,
                        lambda: self.ws.Open(pb.OpenRequest(path=d, access=A.RDONLY,
                                                            directory=True), timeout=TIMEOUT))

    def test_setattr(self):
        V = pb.SetAttrRequest
        for p in files_in(ESCAPE_DIRS, b"secret.txt") + files_in(ESCAPE_DIRS, b"sub"):
            self.denied("SetAttr mode %r" % p,
                        lambda: self.ws.SetAttr(V(path=p, valid=V.MODE, mode=0o777),
                                                timeout=TIMEOUT))
            self.denied("SetAttr size %r" % p,
                        lambda: self.ws.SetAttr(V(path=p, valid=V.SIZE, size=0), timeout=TIMEOUT))
            self.denied("SetAttr mtime %r" % p,
                        lambda: self.ws.SetAttr(V(path=p, mtime=pb.TimeSpec(ns=5)),
                                                timeout=TIMEOUT))
            self.denied("SetAttr uid/gid %r" % p,
                        lambda: self.ws.SetAttr(V(path=p, valid=V.UID | V.GID, uid=os.getuid(),
                                                  gid=os.getgid()), timeout=TIMEOUT))
        for d in ESCAPE_REAL_DIRS + [b".."]:
            self.denied("SetAttr mode of dir %r" % d,
                        lambda: self.ws.SetAttr(V(path=d, valid=V.MODE, mode=0o700),
                                                timeout=TIMEOUT))

    def test_mkdir(self):
        for p in files_in(ESCAPE_DIRS, b"newdir") + [b"../newdir", b"dir/rootlink/../newdir"]:
            self.denied("Mkdir %r" % p,
                        lambda: self.ws.Mkdir(pb.MkdirRequest(path=p, mode=0o755), timeout=TIMEOUT))

    def test_mknod(self):
        for p in files_in(ESCAPE_DIRS, b"newnode") + [b"../newnode"]:
            self.denied("Mknod fifo %r" % p,
                        lambda: self.ws.Mknod(pb.MknodRequest(path=p, mode=stat.S_IFIFO | 0o644),
                                              timeout=TIMEOUT))
            self.denied("Mknod reg %r" % p,
                        lambda: self.ws.Mknod(pb.MknodRequest(path=p, mode=stat.S_IFREG | 0o644),
                                              timeout=TIMEOUT))

    def test_unlink(self):
        for p in files_in(ESCAPE_DIRS, b"secret.txt") + files_in(ESCAPE_DIRS, b"lnk"):
            self.denied("Unlink %r" % p,
                        lambda: self.ws.Unlink(pb.PathRequest(path=p), timeout=TIMEOUT))

    def test_rmdir(self):
        for p in files_in(ESCAPE_DIRS, b"empty") + [b"..", b"dir/rootlink/.."]:
            self.denied("Rmdir %r" % p,
                        lambda: self.ws.Rmdir(pb.PathRequest(path=p), timeout=TIMEOUT))

    def test_rename(self):
        R = pb.RenameRequest
        for d in ESCAPE_DIRS:
            for src, dst in ((d + b"/secret.txt", b"stolen.txt"), (d + b"/sub", b"stolen_dir"),
                             (b"file.txt", d + b"/planted.txt"), (b"dir", d + b"/planted_dir"),
                             (d + b"/secret.txt", d + b"/renamed.txt")):
                self.denied("Rename %r -> %r" % (src, dst),
                            lambda: self.ws.Rename(R(**{"from": src, "to": dst}), timeout=TIMEOUT))
            for src, dst in ((b"file.txt", d + b"/secret.txt"), (d + b"/secret.txt", b"file.txt")):
                self.denied("Rename exchange %r <-> %r" % (src, dst),
                            lambda: self.ws.Rename(R(**{"from": src, "to": dst, "exchange": True}),
                                                   timeout=TIMEOUT))
        self.denied("Rename file.txt -> ../planted.txt",
                    lambda: self.ws.Rename(R(**{"from": b"file.txt", "to": b"../planted.txt"}),
                                           timeout=TIMEOUT))

    def test_link(self):
        L = pb.LinkRequest
        for d in ESCAPE_DIRS:
            for src, dst in ((d + b"/secret.txt", b"hardlink.txt"),
                             (b"file.txt", d + b"/planted_link.txt")):
                self.denied("Link %r -> %r" % (src, dst),
                            lambda: self.ws.Link(L(**{"from": src, "to": dst}), timeout=TIMEOUT))
        self.denied("Link file.txt -> ../planted_link.txt",
                    lambda: self.ws.Link(L(**{"from": b"file.txt", "to": b"../planted_link.txt"}),
                                         timeout=TIMEOUT))

    def test_symlink(self):
        for p in files_in(ESCAPE_DIRS, b"planted_sym") + [b"../planted_sym"]:
            self.denied("Symlink at %r" % p,
                        lambda: self.ws.Symlink(pb.SymlinkRequest(target=b"x", path=p),
                                                timeout=TIMEOUT))

    def test_symlink_target_stored_as_given(self):
        # The target is data: stored byte-exact, never resolved at creation,
        # and never followed out of the root afterwards.
        targets = [b"/etc/passwd", OUT.encode() + b"/secret.txt", b"../../outside/secret.txt",
                   b"../outside"]
        for i, t in enumerate(targets):
            name = b"stored%d" % i
            self.ws.Symlink(pb.SymlinkRequest(target=t, path=name), timeout=TIMEOUT)
            self.assertEqual(os.readlink(os.path.join(ROOT.encode(), name)), t)
            r = self.ws.Readlink(pb.PathRequest(path=name), timeout=TIMEOUT)
            self.assertEqual(r.target, t)
            r = self.ws.Stat(pb.StatRequest(path=name, follow=False), timeout=TIMEOUT)
            self.assertTrue(stat.S_ISLNK(r.attr.mode))
            self.denied("Stat follow %r -> %r" % (name, t),
                        lambda: self.ws.Stat(pb.StatRequest(path=name, follow=True),
                                             timeout=TIMEOUT))
            self.denied("Open %r -> %r" % (name, t),
                        lambda: self.ws.Open(pb.OpenRequest(path=name), timeout=TIMEOUT))
            os.unlink(os.path.join(ROOT.encode(), name))

    def test_readlink(self):
        for p in files_in(ESCAPE_DIRS, b"lnk"):
            self.denied("Readlink %r" % p,
                        lambda: self.ws.Readlink(pb.PathRequest(path=p), timeout=TIMEOUT))

    def test_statfs(self):
        for p in ESCAPE_DIRS + files_in(ESCAPE_DIRS, b"secret.txt") + [b".."]:
            self.denied("StatFs %r" % p,
                        lambda: self.ws.StatFs(pb.PathRequest(path=p), timeout=TIMEOUT))

    def test_xattr(self):
        for p in files_in(ESCAPE_DIRS, b"secret.txt"):
            self.denied("GetXattr %r" % p,
                        lambda: self.ws.GetXattr(pb.GetXattrRequest(path=p, name=b"user.tag"),
                                                 timeout=TIMEOUT))
            self.denied("ListXattr %r" % p,
                        lambda: self.ws.ListXattr(pb.ListXattrRequest(path=p), timeout=TIMEOUT))
            self.denied("SetXattr %r" % p,
                        lambda: self.ws.SetXattr(pb.SetXattrRequest(path=p, name=b"user.evil",
                                                                    value=b"1"), timeout=TIMEOUT))
            self.denied("SetXattr replace %r" % p,
                        lambda: self.ws.SetXattr(pb.SetXattrRequest(path=p, name=b"user.tag",
                                                                    value=b"v2", replace=True),
                                                 timeout=TIMEOUT))
            self.denied("RemoveXattr %r" % p,
                        lambda: self.ws.RemoveXattr(pb.RemoveXattrRequest(path=p,
                                                                          name=b"user.tag"),
                                                    timeout=TIMEOUT))
        for d in ESCAPE_REAL_DIRS:
            self.denied("ListXattr dir %r" % d,
                        lambda: self.ws.ListXattr(pb.ListXattrRequest(path=d), timeout=TIMEOUT))

    def upload(self, path, data=b"PLANTED\n", **hdr):
        def chunks():
            yield pb.UploadChunk(header=pb.UploadHeader(path=path, **hdr), data=data)
            yield pb.UploadChunk(data=b"more\n", commit=True)
        return self.ws.Upload(chunks(), timeout=TIMEOUT)

    def test_upload(self):
        for p in (files_in(ESCAPE_DIRS, b"planted_up.txt") + files_in(ESCAPE_DIRS, b"secret.txt")
                  + [b"../planted_up.txt"]):
            self.denied("Upload %r" % p, lambda: self.upload(p))
            self.denied("Upload mkdirs %r" % p, lambda: self.upload(p, mkdirs=True))
        for d in ESCAPE_DIRS:
            p = d + b"/newsub/deeper/x.txt"
            self.denied("Upload mkdirs %r" % p, lambda: self.upload(p, mkdirs=True))
            p = d + b"/secret.txt"
            self.denied("Upload exclusive %r" % p, lambda: self.upload(p, exclusive=True))

    def test_download(self):
        for p in files_in(ESCAPE_DIRS, b"secret.txt") + ESCAPE_FILE_LINKS:
            self.denied("Download %r" % p,
                        lambda: list(self.ws.Download(pb.DownloadRequest(path=p),
                                                      timeout=TIMEOUT)))
            self.denied("Download offset %r" % p,
                        lambda: list(self.ws.Download(pb.DownloadRequest(path=p, offset=3,
                                                                         length=4),
                                                      timeout=TIMEOUT)))

    def test_in_root_symlinks_replaced_not_followed(self):
        # Calls that act on a final symlink itself (lstat semantics, or
        # replacing the name) may succeed, but must never reach through it.
        # Whatever they answer, the tearDown check proves nothing outside
        # changed.
        def tolerate(fn):
            try:
                fn()
            except grpc.RpcError:
                pass
        self.addCleanup(restore_links)
        for name in (b"dangling", b"danglingabs", b"secretlink", b"abssecret"):
            self.ws.Stat(pb.StatRequest(path=name, follow=False), timeout=TIMEOUT)
            tolerate(lambda: self.upload(name))
            tolerate(lambda: self.da.CreateFiles(devagent_pb2.CreateFileRequest(
                files=[name.decode()], contents=["x"], app_name=""), timeout=TIMEOUT))
        tolerate(lambda: self.ws.SetAttr(
            pb.SetAttrRequest(path=b"up", mtime=pb.TimeSpec(ns=5)), timeout=TIMEOUT))
        tolerate(lambda: self.ws.SetXattr(
            pb.SetXattrRequest(path=b"up", name=b"user.evil", value=b"1"), timeout=TIMEOUT))
        try:
            self.ws.Rename(pb.RenameRequest(**{"from": b"up", "to": b"up_renamed"}),
                           timeout=TIMEOUT)
            self.ws.Unlink(pb.PathRequest(path=b"up_renamed"), timeout=TIMEOUT)
            self.assertFalse(os.path.lexists(os.path.join(ROOT, "up_renamed")))
        finally:
            restore_links()

    def test_inside_still_works(self):
        # The control: the same calls without the escape succeed.
        r = self.ws.Stat(pb.StatRequest(path=b"dir/rootlink/file.txt", follow=True),
                         timeout=TIMEOUT)
        self.assertEqual(r.attr.size, 7)
        r = self.ws.ReadDir(pb.ReadDirRequest(path=b"dir/.."), timeout=TIMEOUT)
        self.assertIn(b"file.txt", [e.name for e in r.entries])
        self.ws.Mkdir(pb.MkdirRequest(path=b"dir/ok_dir", mode=0o755), timeout=TIMEOUT)
        self.ws.Rmdir(pb.PathRequest(path=b"dir/ok_dir"), timeout=TIMEOUT)
        data = b"".join(c.data for c in self.ws.Download(
            pb.DownloadRequest(path=b"/dir/../file.txt"), timeout=TIMEOUT))
        self.assertEqual(data, b"inside\n")


class ExecEscape(EscapeTest):
    def start(self, req):
        """Run req; an error must come before any event (no process ran)."""
        events = []
        try:
            for ev in self.ex.Start(req, timeout=TIMEOUT):
                events.append(ev)
        except grpc.RpcError:
            if events:
                raise AssertionError("a process was started before the error: %r" % events)
            raise
        return events

    def test_exec_cwd(self):
        for i, d in enumerate(ESCAPE_DIRS + [b"..", b"dir/rootlink/.."]):
            marker = os.path.join(BOX, "ran_%d" % i).encode()
            self.denied("Exec argv cwd=%r" % d,
                        lambda: self.start(pb.ExecRequest(argv=[b"touch", marker, b"pwned"],
                                                          cwd=d)))
            self.denied("Exec shell cwd=%r" % d,
                        lambda: self.start(pb.ExecRequest(shell=b"touch pwned \"$1\"",
                                                          args=[marker], cwd=d)))


class DevAgentEscape(EscapeTest):
    def test_create_files(self):
        CF = devagent_pb2.CreateFileRequest
        for d in ESCAPE_DIRS:
            ds = d.decode()
            self.denied("CreateFiles file %r" % (ds + "/planted_cf.txt"),
                        lambda: self.da.CreateFiles(CF(files=[ds + "/planted_cf.txt"],
                                                       contents=["x"], app_name=""),
                                                    timeout=TIMEOUT), errno_trailer=False)
            self.denied("CreateFiles app_name %r" % ds,
                        lambda: self.da.CreateFiles(CF(files=["planted_cf.txt"], contents=["x"],
                                                       app_name=ds),
                                                    timeout=TIMEOUT), errno_trailer=False)
            self.denied("CreateFiles overwrite %r" % (ds + "/secret.txt"),
                        lambda: self.da.CreateFiles(CF(files=[ds + "/secret.txt"],
                                                       contents=["x"], app_name=""),
                                                    timeout=TIMEOUT), errno_trailer=False)
        for files, app in ((["../../outside/planted_cf.txt"], "app"),
                           (["ok.txt", "../../outside/planted_cf.txt"], "app"),
                           (["sub/../../../outside/planted_cf.txt"], "app"),
                           (["../planted_cf.txt"], ""),
                           (["x.txt"], ".."),
                           (["x.txt"], "app/../..")):
            self.denied("CreateFiles files=%r app_name=%r" % (files, app),
                        lambda: self.da.CreateFiles(CF(files=files, contents=["x"] * len(files),
                                                       app_name=app),
                                                    timeout=TIMEOUT), errno_trailer=False)

    def test_view_file(self):
        for p in files_in(ESCAPE_DIRS, b"secret.txt") + ESCAPE_FILE_LINKS:
            ps = p.decode()
            self.denied("ViewFile %r" % ps,
                        lambda: self.da.ViewFile(devagent_pb2.ViewFileRequest(path=ps),
                                                 timeout=TIMEOUT), errno_trailer=False)

    def test_execute_commands(self):
        for i, d in enumerate(ESCAPE_DIRS + [b"..", b"app/../.."]):
            ds = d.decode()
            marker = os.path.join(BOX, "ec_ran_%d" % i)
            self.denied("ExecuteCommands app_name=%r" % ds,
                        lambda: self.da.ExecuteCommands(devagent_pb2.ExecuteCommandsRequest(
                            cmds=["touch %s pwned" % marker], app_name=ds, load_from_file=False),
                            timeout=TIMEOUT), errno_trailer=False)
            self.denied("ExecuteCommands load_from_file app_name=%r" % ds,
                        lambda: self.da.ExecuteCommands(devagent_pb2.ExecuteCommandsRequest(
                            cmds=[], app_name=ds, load_from_file=True),
                            timeout=TIMEOUT), errno_trailer=False)
        # Refused before anything is made: no directory on the way stays.
        self.denied("ExecuteCommands app_name='made1/made2/../../..'",
                    lambda: self.da.ExecuteCommands(devagent_pb2.ExecuteCommandsRequest(
                        cmds=["true"], app_name="made1/made2/../../..", load_from_file=False),
                        timeout=TIMEOUT), errno_trailer=False)
        self.assertFalse(os.path.lexists(os.path.join(ROOT, "made1")),
                         "a refused app_name left made1/ in the workspace")


if __name__ == "__main__":
    if not os.path.exists(os.path.join(OUT, "secret.txt")):
        build_layout()
    prog = unittest.main(verbosity=2, exit=False)
    print("%d escape attempts checked" % EscapeTest.checked, file=sys.stderr)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
