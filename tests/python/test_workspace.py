# SPDX-License-Identifier: Apache-2.0
"""wsbridge.v1.Workspace and Exec as a grpcio client sees them: errors carry
the errno name in the "wsbridge-errno" trailer with the status code that
follows from it, and the calls do what their POSIX namesakes do.

Environment: WSB_TARGET, WSB_ROOT. Run by tests/integration/workspace.bats.
"""
import hashlib
import os
import queue
import stat
import subprocess
import threading
import time
import unittest

import grpc

import wsbtest
from wsbtest import describe, pb, pbg, trailer

TIMEOUT = wsbtest.TIMEOUT
ROOT = wsbtest.env("WSB_ROOT")
SC = grpc.StatusCode


def rp(*parts):
    return os.path.join(ROOT, *parts)


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ch = wsbtest.channel()
        cls.ws = pbg.WorkspaceStub(cls.ch)
        cls.ex = pbg.ExecStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()

    def fails(self, code, errno_name, fn, what, path=None):
        """fn() fails with status @code and trailer @errno_name; the message
        is non-empty and names @path when given."""
        with self.assertRaises(grpc.RpcError, msg=what) as cm:
            fn()
        e = cm.exception
        self.assertEqual((e.code(), trailer(e)), (code, errno_name),
                         "%s: %s" % (what, describe(e)))
        self.assertTrue(e.details(), "%s: empty status message" % what)
        if path is not None:
            self.assertIn(path, e.details(), "%s: message does not name the path" % what)
        return e

    def once_freed(self, fn, what):
        """fn() once it is no longer refused RESOURCE_EXHAUSTED (the streams
        that held the limit were cancelled or read: agentd frees it
        shortly)."""
        for _ in range(100):
            try:
                return fn()
            except grpc.RpcError as e:
                if e.code() != SC.RESOURCE_EXHAUSTED:
                    raise
                time.sleep(0.05)
        self.fail("%s still refused 5 s after what held the limit went" % what)


class Errors(Base):
    def test_stat_missing(self):
        self.fails(SC.NOT_FOUND, "ENOENT",
                   lambda: self.ws.Stat(pb.StatRequest(path=b"missing.txt"), timeout=TIMEOUT),
                   "Stat of a missing file", "missing.txt")
        self.fails(SC.NOT_FOUND, "ENOENT",
                   lambda: self.ws.Stat(pb.StatRequest(path=b"no/such/dir/f", follow=True),
                                        timeout=TIMEOUT),
                   "Stat below a missing dir")

    def test_stat_through_file(self):
        with open(rp("plain"), "w"):
            pass
        self.fails(SC.NOT_FOUND, "ENOTDIR",
                   lambda: self.ws.Stat(pb.StatRequest(path=b"plain/x"), timeout=TIMEOUT),
                   "Stat of plain/x")

    def test_mkdir_existing(self):
        os.makedirs(rp("exists"), exist_ok=True)
        self.fails(SC.ALREADY_EXISTS, "EEXIST",
                   lambda: self.ws.Mkdir(pb.MkdirRequest(path=b"exists", mode=0o755),
                                         timeout=TIMEOUT),
                   "Mkdir of an existing dir", "exists")

    def test_rmdir_not_empty(self):
        os.makedirs(rp("full", "child"), exist_ok=True)
        self.fails(SC.FAILED_PRECONDITION, "ENOTEMPTY",
                   lambda: self.ws.Rmdir(pb.PathRequest(path=b"full"), timeout=TIMEOUT),
                   "Rmdir of a non-empty dir", "full")
        self.assertTrue(os.path.isdir(rp("full", "child")))

    def test_rmdir_file_unlink_dir(self):
        with open(rp("afile"), "w"):
            pass
        os.makedirs(rp("adir"), exist_ok=True)
        self.fails(SC.NOT_FOUND, "ENOTDIR",
                   lambda: self.ws.Rmdir(pb.PathRequest(path=b"afile"), timeout=TIMEOUT),
                   "Rmdir of a file")
        self.fails(SC.FAILED_PRECONDITION, "EISDIR",
                   lambda: self.ws.Unlink(pb.PathRequest(path=b"adir"), timeout=TIMEOUT),
                   "Unlink of a directory")

    def test_open_exclusive_existing(self):
        with open(rp("excl"), "w"):
            pass
        self.fails(SC.ALREADY_EXISTS, "EEXIST",
                   lambda: self.ws.Open(pb.OpenRequest(path=b"excl", access=pb.WRONLY,
                                                       create=True, exclusive=True, mode=0o600),
                                        timeout=TIMEOUT),
                   "Open O_CREAT|O_EXCL of an existing file")

    def test_bad_paths(self):
        self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                   lambda: self.ws.Stat(pb.StatRequest(path=b"a\0b"), timeout=TIMEOUT),
                   "path with a NUL byte")
        self.fails(SC.INVALID_ARGUMENT, "ENAMETOOLONG",
                   lambda: self.ws.Stat(pb.StatRequest(path=b"n" * 256), timeout=TIMEOUT),
                   "a 256-byte name")
        self.fails(SC.INVALID_ARGUMENT, "ENAMETOOLONG",
                   lambda: self.ws.Stat(pb.StatRequest(path=b"a/" * 3000), timeout=TIMEOUT),
                   "a path longer than PATH_MAX")

    def test_bad_handle(self):
        self.fails(SC.FAILED_PRECONDITION, "EBADF",
                   lambda: self.ws.Read(pb.ReadRequest(handle=987654321, size=10),
                                        timeout=TIMEOUT),
                   "Read of an unknown handle")
        self.fails(SC.FAILED_PRECONDITION, "EBADF",
                   lambda: self.ws.Release(pb.HandleRequest(handle=987654321), timeout=TIMEOUT),
                   "Release of an unknown handle")

    def test_release_more(self):
        """Release with `more` releases every handle, as each alone; one
        unknown (or given twice) fails neither the others nor the call."""
        hs = [self.ws.Open(pb.OpenRequest(path=b"rel%d" % i, access=pb.RDWR, create=True,
                                          mode=0o600), timeout=TIMEOUT).handle
              for i in range(4)]
        one = self.ws.Release(pb.HandleRequest(handle=hs[0]), timeout=TIMEOUT)
        self.assertEqual(one.released, 1)
        r = self.ws.Release(pb.HandleRequest(handle=hs[1], more=[hs[2], 987654321, hs[3], hs[2]]),
                            timeout=TIMEOUT)
        self.assertEqual(r.released, 5)
        for h in hs:
            self.fails(SC.FAILED_PRECONDITION, "EBADF",
                       lambda: self.ws.Read(pb.ReadRequest(handle=h, size=1), timeout=TIMEOUT),
                       "Read after a Release with more")
        # The first handle unknown: the others still go.
        h = self.ws.Open(pb.OpenRequest(path=b"rel0", access=pb.RDONLY), timeout=TIMEOUT).handle
        r = self.ws.Release(pb.HandleRequest(handle=987654321, more=[h]), timeout=TIMEOUT)
        self.assertEqual(r.released, 2)
        self.fails(SC.FAILED_PRECONDITION, "EBADF",
                   lambda: self.ws.Read(pb.ReadRequest(handle=h, size=1), timeout=TIMEOUT),
                   "Read after a Release whose first handle was unknown")

    def test_reopen_bad(self):
        r = self.ws.Open(pb.OpenRequest(path=b"re", access=pb.RDWR, create=True, mode=0o600),
                         timeout=TIMEOUT)
        for kw in (dict(create=True), dict(exclusive=True), dict(directory=True)):
            e = self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                           lambda: self.ws.Open(pb.OpenRequest(reopen=r.handle, **kw),
                                                timeout=TIMEOUT),
                           "Open reopen with %s" % kw)
            self.assertIn("reopen", e.details())
        self.ws.Release(pb.HandleRequest(handle=r.handle), timeout=TIMEOUT)

    def test_mknod_device_refused(self):
        self.fails(SC.PERMISSION_DENIED, "EPERM",
                   lambda: self.ws.Mknod(pb.MknodRequest(path=b"dev", mode=stat.S_IFCHR | 0o600),
                                         timeout=TIMEOUT),
                   "Mknod of a character device")
        self.assertFalse(os.path.lexists(rp("dev")))

    def test_getxattr_missing(self):
        with open(rp("nox"), "w"):
            pass
        self.fails(SC.FAILED_PRECONDITION, "ENODATA",
                   lambda: self.ws.GetXattr(pb.GetXattrRequest(path=b"nox", name=b"user.none"),
                                            timeout=TIMEOUT),
                   "GetXattr of a missing attribute")
        # By a handle agentd does not hold: EBADF, not the path's file.
        e = self.fails(SC.FAILED_PRECONDITION, "EBADF",
                       lambda: self.ws.GetXattr(pb.GetXattrRequest(
                           path=b"nox", name=b"user.none", handle=12345), timeout=TIMEOUT),
                       "GetXattr by an unknown handle")
        self.assertIn("handle 12345 is not open", e.details())

    def test_download_missing(self):
        self.fails(SC.NOT_FOUND, "ENOENT",
                   lambda: list(self.ws.Download(pb.DownloadRequest(path=b"nope"),
                                                 timeout=TIMEOUT)),
                   "Download of a missing file", "nope")

    def test_exec_errors(self):
        self.fails(SC.NOT_FOUND, "ENOENT",
                   lambda: list(self.ex.Start(pb.ExecRequest(argv=[b"no-such-prog-wsb"]),
                                              timeout=TIMEOUT)),
                   "Exec of a missing program", "no-such-prog-wsb")
        self.fails(SC.NOT_FOUND, "ENOENT",
                   lambda: list(self.ex.Start(pb.ExecRequest(argv=[b"true"], cwd=b"nodir"),
                                              timeout=TIMEOUT)),
                   "Exec in a missing cwd", "nodir")
        self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                   lambda: list(self.ex.Start(pb.ExecRequest(), timeout=TIMEOUT)),
                   "Exec with neither argv nor shell")
        self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                   lambda: list(self.ex.Start(pb.ExecRequest(argv=[b"true"], shell=b"true"),
                                              timeout=TIMEOUT)),
                   "Exec with both argv and shell")
        # Start's stdin waits in agentd until the command reads it: at most
        # what WriteStdin may queue (20 Starts of 60 MiB took 1.3 GB).
        e = self.fails(SC.RESOURCE_EXHAUSTED, "ENOBUFS",
                       lambda: list(self.ex.Start(pb.ExecRequest(
                           argv=[b"true"], stdin=b"x" * (8 * 1024 * 1024 + 1)), timeout=TIMEOUT)),
                       "Exec with more stdin than may queue")
        self.assertIn("WriteStdin", e.details())
        out = b"".join(ev.stdout.data for ev in self.ex.Start(pb.ExecRequest(
            argv=[b"wc", b"-c"], stdin=b"x" * (8 * 1024 * 1024)), timeout=TIMEOUT)
            if ev.HasField("stdout"))
        self.assertEqual(out.strip(), b"8388608")


class Behaviour(Base):

    def test_file_round_trip(self):
        r = self.ws.Open(pb.OpenRequest(path=b"rw.bin", access=pb.RDWR, create=True,
                                        mode=0o640), timeout=TIMEOUT)
        h = r.handle
        self.assertNotEqual(h, 0)
        self.assertEqual(stat.S_IMODE(r.attr.mode), 0o640)
        self.assertFalse(r.existed)
        # O_CREAT of the file now there opens it and says so; mode unused
        r2 = self.ws.Open(pb.OpenRequest(path=b"rw.bin", access=pb.RDONLY, create=True,
                                         mode=0o600), timeout=TIMEOUT)
        self.assertTrue(r2.existed)
        self.assertEqual(stat.S_IMODE(r2.attr.mode), 0o640)
        self.ws.Release(pb.HandleRequest(handle=r2.handle), timeout=TIMEOUT)
        data = bytes(range(256)) * 5
        w = self.ws.Write(pb.WriteRequest(handle=h, offset=10, data=data), timeout=TIMEOUT)
        self.assertEqual(w.written, len(data))
        self.assertEqual(w.attr.size, 10 + len(data))
        rd = self.ws.Read(pb.ReadRequest(handle=h, offset=0, size=100000), timeout=TIMEOUT)
        self.assertEqual(rd.data, b"\0" * 10 + data)
        rd = self.ws.Read(pb.ReadRequest(handle=h, offset=1000000, size=10), timeout=TIMEOUT)
        self.assertEqual(rd.data, b"")
        self.ws.Fsync(pb.FsyncRequest(handle=h), timeout=TIMEOUT)
        # The handle survives an unlink of its path.
        self.ws.Unlink(pb.PathRequest(path=b"rw.bin"), timeout=TIMEOUT)
        self.assertFalse(os.path.exists(rp("rw.bin")))
        rd = self.ws.Read(pb.ReadRequest(handle=h, offset=10, size=3), timeout=TIMEOUT)
        self.assertEqual(rd.data, data[:3])
        # ... and opens anew without a name (OpenRequest.reopen), with
        # read-ahead; a path given alongside is not used.
        r3 = self.ws.Open(pb.OpenRequest(reopen=h, path=b"nothere", access=pb.RDONLY,
                                         read_ahead=12), timeout=TIMEOUT)
        self.assertNotIn(r3.handle, (0, h))
        self.assertEqual((r3.attr.ino, r3.attr.nlink), (w.attr.ino, 0))
        self.assertEqual(r3.data, b"\0" * 10 + data[:2])
        r4 = self.ws.Open(pb.OpenRequest(reopen=r3.handle, access=pb.WRONLY, truncate=True),
                          timeout=TIMEOUT)
        self.assertEqual(r4.attr.size, 0)
        self.fails(SC.FAILED_PRECONDITION, "EBADF",
                   lambda: self.ws.Write(pb.WriteRequest(handle=r3.handle, data=b"x"),
                                         timeout=TIMEOUT),
                   "Write through a read-only reopen")
        for hh in (r3.handle, r4.handle):
            self.ws.Release(pb.HandleRequest(handle=hh), timeout=TIMEOUT)
        self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT)
        self.fails(SC.FAILED_PRECONDITION, "EBADF",
                   lambda: self.ws.Open(pb.OpenRequest(reopen=h), timeout=TIMEOUT),
                   "Open reopen of a released handle")
        self.fails(SC.FAILED_PRECONDITION, "EBADF",
                   lambda: self.ws.Read(pb.ReadRequest(handle=h, size=1), timeout=TIMEOUT),
                   "Read after Release")

    def test_sessions(self):
        """A malformed "wsbridge-session" fails an Open with INVALID_ARGUMENT
        naming the metadata, and creates nothing; a Watch with no_events
        holds a session: READY, then nothing while files change."""
        bad = (("wsbridge-session", "no spaces"),)
        e = self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                       lambda: self.ws.Open(pb.OpenRequest(path=b"sess", access=pb.RDWR,
                                                           create=True, mode=0o600),
                                            metadata=bad, timeout=TIMEOUT),
                       "Open with a malformed session id")
        self.assertIn("wsbridge-session", e.details())
        self.assertFalse(os.path.exists(rp("sess")))
        md = (("wsbridge-session", "py-1"),)
        h = self.ws.Open(pb.OpenRequest(path=b"sess", access=pb.RDWR, create=True, mode=0o600),
                         metadata=md, timeout=TIMEOUT).handle
        call = self.ws.Watch(pb.WatchRequest(no_events=True), metadata=md, timeout=1.5)
        it = iter(call)
        try:
            ready = next(it).events
            self.assertEqual([(e.kind, e.no_events) for e in ready], [(pb.WatchEvent.READY, True)])
            with open(rp("sess2"), "w") as f:
                f.write("x")
            with self.assertRaises(grpc.RpcError) as cm:
                next(it)
            self.assertEqual(cm.exception.code(), SC.DEADLINE_EXCEEDED, describe(cm.exception))
        finally:
            call.cancel()
        self.assertEqual(self.ws.Read(pb.ReadRequest(handle=h, size=4), timeout=TIMEOUT).data,
                         b"")
        self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT)

    def test_watch_folded_changes(self):
        """READY says that agentd flags the changes it folds into a CREATED
        or MOVED; a file written right after its create comes as one
        CREATED with changed; a rename alone as a MOVED without."""
        call = self.ws.Watch(pb.WatchRequest(), timeout=TIMEOUT)
        it = iter(call)
        try:
            first = next(it).events[0]
            self.assertEqual(first.kind, pb.WatchEvent.READY)
            self.assertTrue(first.changed)
            with open(rp("wf.txt"), "w") as f:  # create, write, close at once
                f.write("x" * 100)

            def until(kind, path):
                while True:
                    for e in next(it).events:
                        if e.kind == kind and e.path == path:
                            return e

            e = until(pb.WatchEvent.CREATED, b"wf.txt")
            self.assertTrue(e.changed)
            self.assertEqual(e.attr.size, 100)
            time.sleep(0.05)
            os.rename(rp("wf.txt"), rp("wg.txt"))
            e = until(pb.WatchEvent.MOVED, b"wg.txt")
            self.assertEqual(getattr(e, "from"), b"wf.txt")
            self.assertFalse(e.changed)
        finally:
            call.cancel()
            os.unlink(rp("wg.txt"))

    def test_stat_values(self):
        with open(rp("st.txt"), "wb") as f:
            f.write(b"12345")
        os.chmod(rp("st.txt"), 0o604)
        os.utime(rp("st.txt"), ns=(1_600_000_000_123_456_789, 1_500_000_000_987_654_321))
        st = os.lstat(rp("st.txt"))
        a = self.ws.Stat(pb.StatRequest(path=b"/st.txt"), timeout=TIMEOUT).attr
        self.assertEqual((a.ino, a.mode, a.nlink, a.uid, a.gid, a.size, a.atime_ns, a.mtime_ns),
                         (st.st_ino, st.st_mode, st.st_nlink, st.st_uid, st.st_gid, 5,
                          1_600_000_000_123_456_789, 1_500_000_000_987_654_321))
        os.symlink("st.txt", rp("st.lnk"))
        a = self.ws.Stat(pb.StatRequest(path=b"st.lnk", follow=False), timeout=TIMEOUT).attr
        self.assertTrue(stat.S_ISLNK(a.mode))
        self.assertEqual(a.size, 6)
        a = self.ws.Stat(pb.StatRequest(path=b"st.lnk", follow=True), timeout=TIMEOUT).attr
        self.assertEqual(a.ino, st.st_ino)

    def test_identity(self):
        """Attr.btime_ns and Attr.generation name one file: the same in Stat,
        ReadDir, Open, Link and after a Rename; another file on the freed
        inode number has another generation. (A workspace on ext4 or tmpfs:
        both keep births and give file handles.)"""
        def stat(p):
            return self.ws.Stat(pb.StatRequest(path=p), timeout=TIMEOUT).attr

        with open(rp("id1"), "w") as f:
            f.write("x")
        a = stat(b"id1")
        self.assertNotEqual(a.btime_ns, 0)
        self.assertNotEqual(a.generation, 0)
        ents = self.ws.ReadDir(pb.ReadDirRequest(path=b""), timeout=TIMEOUT).entries
        e = [d.attr for d in ents if d.name == b"id1"][0]
        self.assertEqual((e.ino, e.btime_ns, e.generation), (a.ino, a.btime_ns, a.generation))
        o = self.ws.Open(pb.OpenRequest(path=b"id1", access=pb.RDONLY), timeout=TIMEOUT)
        self.ws.Release(pb.HandleRequest(handle=o.handle), timeout=TIMEOUT)
        self.assertEqual((o.attr.btime_ns, o.attr.generation), (a.btime_ns, a.generation))
        ln = self.ws.Link(pb.LinkRequest(**{"from": b"id1", "to": b"id1.ln"}),
                          timeout=TIMEOUT).attr
        self.assertEqual((ln.btime_ns, ln.generation), (a.btime_ns, a.generation))
        os.unlink(rp("id1.ln"))
        self.ws.Rename(pb.RenameRequest(**{"from": b"id1", "to": b"id2"}), timeout=TIMEOUT)
        r = stat(b"id2")
        self.assertEqual((r.ino, r.btime_ns, r.generation), (a.ino, a.btime_ns, a.generation))
        seen = {}
        for i in range(50):
            os.unlink(rp("id2"))
            with open(rp("id2"), "w") as f:
                f.write("y")
            b = stat(b"id2")
            self.assertNotIn((b.ino, b.generation), seen, "a file made anew kept a generation")
            seen[(b.ino, b.generation)] = i
        self.assertNotIn((a.ino, a.generation), seen)

    def test_readdir_pages(self):
        os.makedirs(rp("many"))
        names = sorted(b"f%04d" % i for i in range(300))
        for n in names:
            open(os.path.join(rp("many").encode(), n), "w").close()
        got, off, pages = [], 0, 0
        while True:
            r = self.ws.ReadDir(pb.ReadDirRequest(path=b"many", offset=off, max_entries=64),
                                timeout=TIMEOUT)
            pages += 1
            self.assertLessEqual(len(r.entries), 64)
            got += [e.name for e in r.entries]
            for e in r.entries:
                self.assertTrue(stat.S_ISREG(e.attr.mode), e.name)
            if r.eof:
                break
            self.assertTrue(r.entries, "an empty page without eof")
            off = r.entries[-1].next_offset
            self.assertLess(pages, 100)
        self.assertEqual(sorted(got), names)
        self.assertGreaterEqual(pages, 5)

    def test_readdir_prefetch(self):
        # pf/a/{1,2}, pf/a/b/{3}, pf/big/ (50 entries), pf/c/, pf/ln -> a
        base = rp("pf")
        for d in ("a/b", "big", "c"):
            os.makedirs(os.path.join(base, d))
        for f in ("a/1", "a/2", "a/b/3"):
            open(os.path.join(base, f), "w").close()
        for i in range(50):
            open(os.path.join(base, "big", "f%02d" % i), "w").close()
        os.symlink("a", os.path.join(base, "ln"))

        def listing(budget):
            r = self.ws.ReadDir(pb.ReadDirRequest(path=b"pf", prefetch=budget), timeout=TIMEOUT)
            self.assertTrue(r.eof)
            return {d.path: sorted(e.name for e in d.entries) for d in r.subdirs}

        self.assertEqual(listing(0), {}, "no prefetch asked")
        # Everything fits: every directory, breadth first, paths from the
        # root; the symlink is not followed.
        got = listing(4096)
        self.assertEqual(got, {b"pf/a": [b"1", b"2", b"b"], b"pf/a/b": [b"3"],
                               b"pf/big": [b"f%02d" % i for i in range(50)], b"pf/c": []})
        # A budget of 10: big (50) does not fit and is skipped whole; the
        # rest is listed while the budget lasts.
        got = listing(10)
        self.assertNotIn(b"pf/big", got)
        self.assertEqual(got.get(b"pf/a"), [b"1", b"2", b"b"])
        self.assertLessEqual(sum(len(v) for v in got.values()), 10)
        for path, names in got.items():
            self.assertEqual(sorted(os.listdir(os.path.join(ROOT.encode(), path))), names, path)
        # Only for a whole listing from offset 0.
        r = self.ws.ReadDir(pb.ReadDirRequest(path=b"pf", max_entries=1, prefetch=4096),
                            timeout=TIMEOUT)
        self.assertFalse(r.eof)
        self.assertEqual(list(r.subdirs), [])

    def test_open_read_ahead(self):
        with open(rp("ra"), "wb") as f:
            f.write(b"x" * 1000)
        ws = self.ws

        def opened(**kw):
            r = ws.Open(pb.OpenRequest(path=b"ra", **kw), timeout=TIMEOUT)
            ws.Release(pb.HandleRequest(handle=r.handle), timeout=TIMEOUT)
            return r

        r = opened()
        self.assertEqual((r.data, r.data_eof), (b"", False), "no read_ahead asked")
        r = opened(read_ahead=4096)
        self.assertEqual((r.data, r.data_eof), (b"x" * 1000, True))
        r = opened(read_ahead=1000)  # exactly the size: still known whole
        self.assertEqual((r.data, r.data_eof), (b"x" * 1000, True))
        r = opened(read_ahead=999)
        self.assertEqual((r.data, r.data_eof), (b"x" * 999, False))
        r = opened(read_ahead=4096, access=pb.WRONLY)
        self.assertEqual((r.data, r.data_eof), (b"", False), "write-only: nothing read")
        # Capped below 1 MiB + 1: a 3 MiB file gives a partial first chunk.
        with open(rp("ra3"), "wb") as f:
            f.write(os.urandom(3 << 20))
        r = ws.Open(pb.OpenRequest(path=b"ra3", read_ahead=64 << 20), timeout=TIMEOUT)
        ws.Release(pb.HandleRequest(handle=r.handle), timeout=TIMEOUT)
        self.assertFalse(r.data_eof)
        self.assertTrue(0 < len(r.data) < (1 << 20) + 1)
        with open(rp("ra3"), "rb") as f:
            self.assertEqual(r.data, f.read(len(r.data)))

    def test_rename_link_symlink(self):
        with open(rp("a"), "w") as f:
            f.write("A")
        with open(rp("b"), "w") as f:
            f.write("B")
        self.ws.Rename(pb.RenameRequest(**{"from": b"a", "to": b"b"}), timeout=TIMEOUT)
        with open(rp("b")) as f:
            self.assertEqual(f.read(), "A")
        self.assertFalse(os.path.exists(rp("a")))
        with open(rp("c"), "w") as f:
            f.write("C")
        self.fails(SC.ALREADY_EXISTS, "EEXIST",
                   lambda: self.ws.Rename(pb.RenameRequest(**{"from": b"c", "to": b"b",
                                                              "noreplace": True}),
                                          timeout=TIMEOUT),
                   "Rename noreplace over an existing file")
        self.ws.Rename(pb.RenameRequest(**{"from": b"c", "to": b"b", "exchange": True}),
                       timeout=TIMEOUT)
        with open(rp("b")) as f, open(rp("c")) as g:
            self.assertEqual((f.read(), g.read()), ("C", "A"))
        r = self.ws.Link(pb.LinkRequest(**{"from": b"b", "to": b"b2"}), timeout=TIMEOUT)
        self.assertEqual(r.attr.nlink, 2)
        self.assertEqual(os.stat(rp("b")).st_ino, os.stat(rp("b2")).st_ino)
        self.ws.Symlink(pb.SymlinkRequest(target=b"b", path=b"bl"), timeout=TIMEOUT)
        self.assertEqual(os.readlink(rp("bl")), "b")
        self.assertEqual(self.ws.Readlink(pb.PathRequest(path=b"bl"), timeout=TIMEOUT).target,
                         b"b")

    def test_rename_keep_replaced(self):
        R = pb.RenameRequest
        for name, data in ((b"k", "old"), (b"k.new", "new"), (b"k2", "x"), (b"kd", None)):
            if data is None:
                os.mkdir(rp(name.decode()))
            else:
                with open(rp(name.decode()), "w") as f:
                    f.write(data)
        ino = os.stat(rp("k")).st_ino
        r = self.ws.Rename(R(**{"from": b"k.new", "to": b"k", "keep_replaced": True}),
                           timeout=TIMEOUT)
        self.assertNotEqual(r.replaced, 0)
        self.assertEqual((r.replaced_attr.ino, r.replaced_attr.nlink), (ino, 0))
        # The kept handle opens the replaced file; it is read-only.
        self.fails(SC.FAILED_PRECONDITION, "EBADF",
                   lambda: self.ws.Write(pb.WriteRequest(handle=r.replaced, data=b"x"),
                                         timeout=TIMEOUT),
                   "Write through a kept handle")
        o = self.ws.Open(pb.OpenRequest(reopen=r.replaced, read_ahead=8), timeout=TIMEOUT)
        self.assertEqual(o.data, b"old")
        for h in (o.handle, r.replaced):
            self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT)
        with open(rp("k")) as f:
            self.assertEqual(f.read(), "new")
        # Nothing kept: without keep_replaced, with nothing replaced, for
        # an exchange, for a directory replaced.
        with open(rp("k4"), "w") as f:
            f.write("y")
        os.mkdir(rp("kd2"))
        for q in (R(**{"from": b"k", "to": b"k2"}),
                  R(**{"from": b"k2", "to": b"k3", "keep_replaced": True}),
                  R(**{"from": b"k3", "to": b"k4", "keep_replaced": True, "exchange": True}),
                  R(**{"from": b"kd", "to": b"kd2", "keep_replaced": True})):
            self.assertEqual(self.ws.Rename(q, timeout=TIMEOUT).replaced, 0, str(q))

    def test_setattr(self):
        with open(rp("sa"), "w") as f:
            f.write("0123456789")
        V = pb.SetAttrRequest
        a = self.ws.SetAttr(V(path=b"sa", valid=V.MODE | V.SIZE, mode=0o600, size=4,
                              mtime=pb.TimeSpec(ns=1_234_567_890_123_456_789)),
                            timeout=TIMEOUT).attr
        st = os.stat(rp("sa"))
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns),
                         (0o600, 4, 1_234_567_890_123_456_789))
        self.assertEqual((a.size, stat.S_IMODE(a.mode), a.mtime_ns),
                         (4, 0o600, 1_234_567_890_123_456_789))

    def test_setattr_time_past_int64_ns(self):
        """A time int64 nanoseconds cannot hold (2300-01-01) goes exactly
        in TimeSpec's s and nsec and comes back in Attr's pair, with the
        nanoseconds at their nearest end; an nsec of 10^9 is refused and
        changes nothing."""
        with open(rp("wide"), "w"):
            pass
        os.chmod(rp("wide"), 0o640)
        S, N, MAX = 10_413_792_000, 123_456_789, 2**63 - 1
        V = pb.SetAttrRequest
        a = self.ws.SetAttr(V(path=b"wide", mtime=pb.TimeSpec(ns=MAX, s=S, nsec=N)),
                            timeout=TIMEOUT).attr
        self.assertEqual(os.stat(rp("wide")).st_mtime_ns, S * 10**9 + N)
        self.assertEqual((a.mtime_ns, a.mtime_s, a.mtime_nsec), (MAX, S, N))
        self.assertEqual((a.ctime_s, a.ctime_nsec), (0, 0))  # a time that fits: no pair
        a = self.ws.Stat(pb.StatRequest(path=b"wide"), timeout=TIMEOUT).attr
        self.assertEqual((a.mtime_ns, a.mtime_s, a.mtime_nsec), (MAX, S, N))
        e = self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                       lambda: self.ws.SetAttr(V(path=b"wide", valid=V.MODE, mode=0o600,
                                                 atime=pb.TimeSpec(ns=MAX, s=S, nsec=10**9)),
                                               timeout=TIMEOUT),
                       "SetAttr with a time's nsec of 10^9")
        self.assertIn("nsec", e.details())
        st = os.stat(rp("wide"))
        self.assertEqual((st.st_mtime_ns, stat.S_IMODE(st.st_mode)), (S * 10**9 + N, 0o640))

    def test_write_setattr_after(self):
        """Write with setattr_after: the change follows the write in one
        call (its mtime wins over the write's); one naming a size is
        refused and writes nothing."""
        r = self.ws.Open(pb.OpenRequest(path=b"wsa", access=pb.WRONLY, create=True,
                                        mode=0o644), timeout=TIMEOUT)
        V = pb.SetAttrRequest
        T = 1_111_111_111_222_333_444
        after = V(valid=V.MODE, mode=0o600, mtime=pb.TimeSpec(ns=T), atime=pb.TimeSpec(ns=T))
        w = self.ws.Write(pb.WriteRequest(handle=r.handle, offset=0, data=b"abc",
                                          setattr_after=after), timeout=TIMEOUT)
        st = os.stat(rp("wsa"))
        self.assertEqual((w.written, w.setattr_done, w.setattr_errno), (3, True, ""))
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns),
                         (0o600, 3, T))
        self.assertEqual((stat.S_IMODE(w.attr.mode), w.attr.size, w.attr.mtime_ns),
                         (0o600, 3, T))
        e = self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                       lambda: self.ws.Write(pb.WriteRequest(
                           handle=r.handle, offset=3, data=b"def",
                           setattr_after=V(valid=V.SIZE, size=1)), timeout=TIMEOUT),
                       "Write with a size in setattr_after")
        self.assertIn("size", e.details())
        self.assertEqual(os.stat(rp("wsa")).st_size, 3)
        self.ws.Release(pb.HandleRequest(handle=r.handle), timeout=TIMEOUT)

    def test_xattr(self):
        with open(rp("xa"), "w"):
            pass
        self.ws.SetXattr(pb.SetXattrRequest(path=b"xa", name=b"user.k", value=b"v\0\xff"),
                         timeout=TIMEOUT)
        self.assertEqual(os.getxattr(rp("xa"), "user.k"), b"v\0\xff")
        r = self.ws.GetXattr(pb.GetXattrRequest(path=b"xa", name=b"user.k"), timeout=TIMEOUT)
        self.assertEqual(r.value, b"v\0\xff")
        r = self.ws.ListXattr(pb.ListXattrRequest(path=b"xa"), timeout=TIMEOUT)
        self.assertIn(b"user.k", list(r.names))
        self.fails(SC.ALREADY_EXISTS, "EEXIST",
                   lambda: self.ws.SetXattr(pb.SetXattrRequest(path=b"xa", name=b"user.k",
                                                               value=b"w", create=True),
                                            timeout=TIMEOUT),
                   "SetXattr create of an existing attribute")
        self.ws.RemoveXattr(pb.RemoveXattrRequest(path=b"xa", name=b"user.k"), timeout=TIMEOUT)
        self.assertEqual(os.listxattr(rp("xa")), [])

    def test_upload_download(self):
        blob = os.urandom(3 * 1024 * 1024 + 17)

        def chunks():
            yield pb.UploadChunk(header=pb.UploadHeader(path=b"up/nested/blob", mkdirs=True,
                                                        mode=0o600))
            for i in range(0, len(blob), 1 << 20):
                yield pb.UploadChunk(data=blob[i:i + (1 << 20)])
            yield pb.UploadChunk(hole=4096, commit=True)
        r = self.ws.Upload(chunks(), timeout=TIMEOUT)
        self.assertEqual(r.size, len(blob) + 4096)
        with open(rp("up", "nested", "blob"), "rb") as f:
            self.assertEqual(f.read(), blob + b"\0" * 4096)
        self.assertEqual(stat.S_IMODE(os.stat(rp("up", "nested", "blob")).st_mode), 0o600)
        self.assertEqual(os.listdir(rp("up", "nested")), ["blob"])
        out = bytearray()
        first = True
        for c in self.ws.Download(pb.DownloadRequest(path=b"up/nested/blob"), timeout=TIMEOUT):
            if first:
                self.assertEqual(c.attr.size, len(blob) + 4096)
                first = False
            out += c.data
            out += b"\0" * c.hole
        self.assertEqual(bytes(out), blob + b"\0" * 4096)
        part = b"".join(c.data + b"\0" * c.hole for c in self.ws.Download(
            pb.DownloadRequest(path=b"up/nested/blob", offset=100, length=50), timeout=TIMEOUT))
        self.assertEqual(part, blob[100:150])

    def test_download_streams_limited(self):
        # Each Download streaming holds a 1 MiB buffer in agentd: 64 at
        # once at most (before: 400 took agentd from 11 to 833 MB).
        with open(rp("dl-big"), "wb") as f:
            f.write(os.urandom(1 << 20) * 16)
        with open(rp("dl-small"), "wb") as f:
            f.write(b"small")
        small = lambda: b"".join(c.data for c in self.ws.Download(
            pb.DownloadRequest(path=b"dl-small"), timeout=TIMEOUT))
        # A client that does not read on: small windows, no BDP probing
        # (which would grow them), so each stream stays blocked in agentd
        # after its first chunk instead of landing in this client's buffers.
        ch = grpc.insecure_channel(wsbtest.env("WSB_TARGET"), options=[
            ("grpc.max_receive_message_length", 64 << 20), ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", 65536)])
        slow = pbg.WorkspaceStub(ch)
        calls = []
        try:
            for _ in range(64):
                it = slow.Download(pb.DownloadRequest(path=b"dl-big"), timeout=TIMEOUT)
                next(it)  # its first chunk: the stream is open in agentd
                calls.append(it)
            with self.assertRaises(grpc.RpcError) as cm:
                small()
            self.assertEqual(cm.exception.code(), SC.RESOURCE_EXHAUSTED, describe(cm.exception))
            self.assertIn("64 downloads", cm.exception.details())
        finally:
            for it in calls:
                it.cancel()
            ch.close()
        # Once they ended, downloads work again.
        self.assertEqual(self.once_freed(small, "downloads"), b"small")

    def test_upload_streams_limited(self):
        # Each Upload open holds two descriptors in agentd until it commits:
        # 64 at once at most (before: a client holding thousands ran agentd
        # out of descriptors, and gRPC then accepted no connection again).
        gate = threading.Event()

        def idle(i):
            yield pb.UploadChunk(header=pb.UploadHeader(path=b"idle-%d" % i), data=b"x")
            gate.wait(TIMEOUT)
        futs = []
        try:
            for i in range(64):
                futs.append(self.ws.Upload.future(idle(i), timeout=TIMEOUT))
            # An upload without a commit changes nothing (ABORTED) while
            # agentd takes it; the 65th open at once is refused.
            deadline = time.monotonic() + 10
            while True:
                with self.assertRaises(grpc.RpcError) as cm:
                    self.ws.Upload(iter([pb.UploadChunk(header=pb.UploadHeader(path=b"probe"),
                                                        data=b"y")]), timeout=TIMEOUT)
                e = cm.exception
                if e.code() != SC.ABORTED or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual((e.code(), trailer(e)), (SC.RESOURCE_EXHAUSTED, "EAGAIN"),
                             describe(e))
            self.assertIn("64 uploads", e.details())
        finally:
            for f in futs:
                f.cancel()
            gate.set()
        # Once they ended, uploads work again, and none left a file.
        self.once_freed(lambda: self.ws.Upload(iter([pb.UploadChunk(
            header=pb.UploadHeader(path=b"one-more"), data=b"y", commit=True)]),
            timeout=TIMEOUT), "uploads")
        with open(rp("one-more"), "rb") as f:
            self.assertEqual(f.read(), b"y")
        self.assertEqual([n for n in os.listdir(ROOT)
                          if n.startswith((".wsb-upload.", "idle-", "probe"))], [])

    def test_download_of_a_leased_file_does_not_wait(self):
        # A process in the pod that holds a lease on a file (fcntl(2)
        # F_SETLEASE) kept every open of it waiting for the lease to be
        # broken, 45 s, and with it one of agentd's threads: four such
        # Downloads held every thread and an unrelated Stat waited 43 s.
        import fcntl
        import signal
        with open(rp("leased"), "wb") as f:
            f.write(b"leased bytes")
        old = signal.signal(signal.SIGIO, signal.SIG_IGN)  # a break is SIGIO
        fd = os.open(rp("leased"), os.O_RDONLY)
        try:
            try:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
            except OSError as e:
                self.skipTest("no lease here: %s" % e)
            t0 = time.monotonic()
            self.fails(SC.RESOURCE_EXHAUSTED, "EAGAIN", lambda: list(self.ws.Download(
                pb.DownloadRequest(path=b"leased"), timeout=TIMEOUT)), "Download of a leased file",
                "leased")
            self.assertLess(time.monotonic() - t0, 5)
            self.ws.Stat(pb.StatRequest(path=b"leased"), timeout=5)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        finally:
            os.close(fd)
            signal.signal(signal.SIGIO, old)
        self.assertEqual(b"".join(c.data for c in self.ws.Download(
            pb.DownloadRequest(path=b"leased"), timeout=TIMEOUT)), b"leased bytes")

    def test_upload_exclusive_and_missing_parent(self):
        with open(rp("ex"), "w") as f:
            f.write("old")
        up = lambda p, **kw: self.ws.Upload(iter([pb.UploadChunk(
            header=pb.UploadHeader(path=p, **kw), data=b"new", commit=True)]), timeout=TIMEOUT)
        self.fails(SC.ALREADY_EXISTS, "EEXIST", lambda: up(b"ex", exclusive=True),
                   "Upload exclusive over an existing file")
        with open(rp("ex")) as f:
            self.assertEqual(f.read(), "old")
        self.fails(SC.NOT_FOUND, "ENOENT", lambda: up(b"nodir/x"),
                   "Upload below a missing dir without mkdirs")
        self.assertEqual(sorted(n for n in os.listdir(ROOT) if n.startswith("ex")), ["ex"])

    def test_upload_without_commit_writes_nothing(self):
        # A stream that ends without its commit chunk is what a cancelled
        # client looks like to the server: the old file must stay.
        with open(rp("keep"), "w") as f:
            f.write("old")

        def chunks():
            yield pb.UploadChunk(header=pb.UploadHeader(path=b"keep"), data=b"partial")
            yield pb.UploadChunk(data=b"more")
        self.fails(SC.ABORTED, "ECANCELED", lambda: self.ws.Upload(chunks(), timeout=TIMEOUT),
                   "Upload without commit")
        with open(rp("keep")) as f:
            self.assertEqual(f.read(), "old")
        self.assertEqual(sorted(n for n in os.listdir(ROOT) if n.startswith((".wsb", "keep"))),
                         ["keep"])

        def after_commit():
            yield pb.UploadChunk(header=pb.UploadHeader(path=b"keep"), data=b"x", commit=True)
            yield pb.UploadChunk(data=b"y")
        self.fails(SC.INVALID_ARGUMENT, "EINVAL",
                   lambda: self.ws.Upload(after_commit(), timeout=TIMEOUT),
                   "Upload with a chunk after commit")
        with open(rp("keep")) as f:
            self.assertEqual(f.read(), "old")

    def test_upload_cancelled_leaves_nothing(self):
        gate = threading.Event()

        def chunks():
            yield pb.UploadChunk(header=pb.UploadHeader(path=b"cancelled"), data=b"x" * 1000)
            gate.wait(5)
        fut = self.ws.Upload.future(chunks(), timeout=TIMEOUT)
        time.sleep(0.3)
        fut.cancel()
        gate.set()
        with self.assertRaises(grpc.FutureCancelledError):
            fut.result()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(n.startswith((".cancelled", "cancelled"))
                                                  for n in os.listdir(ROOT)):
            time.sleep(0.05)
        self.assertEqual([n for n in os.listdir(ROOT) if "cancelled" in n], [])

    def test_exec_stream(self):
        evs = list(self.ex.Start(pb.ExecRequest(
            shell=b'printf "%s" "$1"; printf err >&2; exit 5', args=[b"a b;$(x)"],
            env=[b"WSB_T=1"]), timeout=TIMEOUT))
        self.assertTrue(evs[0].HasField("started") and evs[0].started.pid > 0)
        self.assertEqual(b"".join(e.stdout.data for e in evs if e.HasField("stdout")),
                         b"a b;$(x)")
        self.assertEqual(b"".join(e.stderr.data for e in evs if e.HasField("stderr")), b"err")
        self.assertTrue(evs[-1].HasField("exited"))
        self.assertEqual((evs[-1].exited.code, evs[-1].exited.signal), (5, 0))

    def test_exec_stdin_env_cwd(self):
        os.makedirs(rp("wd"), exist_ok=True)
        evs = list(self.ex.Start(pb.ExecRequest(
            shell=b'cat; echo "$WSB_T"; pwd', stdin=b"in\n", env=[b"WSB_T=v=1"], cwd=b"wd"),
            timeout=TIMEOUT))
        out = b"".join(e.stdout.data for e in evs if e.HasField("stdout"))
        self.assertEqual(out, b"in\nv=1\n" + os.path.realpath(rp("wd")).encode() + b"\n")

    def test_exec_not_utf8_and_offsets(self):
        evs = list(self.ex.Start(pb.ExecRequest(argv=[b"head", b"-c", b"300000",
                                                      b"/dev/urandom"]), timeout=TIMEOUT))
        outs = [e.stdout for e in evs if e.HasField("stdout")]
        off = 0
        for o in outs:
            self.assertEqual(o.offset, off)
            off += len(o.data)
        self.assertEqual(off, 300000)


class OpStream(Base):
    """Workspace/Ops: unary calls as messages of one stream, each ending as
    it would alone."""
    M = "/wsbridge.v1.Workspace/"

    def op(self, method, req):
        return pb.OpRequest(method=self.M + method, request=req.SerializeToString())

    def run_ops(self, reqs):
        return list(self.ws.Ops(iter(reqs), timeout=TIMEOUT))

    def test_calls_in_order(self):
        with open(rp("ops.txt"), "wb") as f:
            f.write(b"0123456789")
        reps = self.run_ops([
            self.op("Stat", pb.StatRequest(path=b"ops.txt")),
            self.op("Stat", pb.StatRequest(path=b"ops-missing")),
            self.op("Open", pb.OpenRequest(path=b"ops.txt", access=pb.Access.RDONLY)),
        ])
        self.assertEqual(len(reps), 3)
        st = pb.StatReply.FromString(reps[0].reply)
        self.assertEqual((reps[0].code, st.attr.ino, st.attr.size),
                         (0, os.stat(rp("ops.txt")).st_ino, 10))
        self.assertEqual((reps[1].code, reps[1].errno_name, reps[1].reply),
                         (SC.NOT_FOUND.value[0], "ENOENT", b""))
        self.assertIn("ops-missing", reps[1].message)
        h = pb.OpenReply.FromString(reps[2].reply).handle
        self.assertNotEqual(h, 0)
        # A handle opened in one stream serves calls in another, and unary.
        reps = self.run_ops([self.op("Read", pb.ReadRequest(handle=h, offset=2, size=3)),
                             self.op("Release", pb.HandleRequest(handle=h))])
        self.assertEqual(pb.ReadReply.FromString(reps[0].reply).data, b"234")
        self.assertEqual(reps[1].code, 0)

    def test_bad_ops_fail_alone(self):
        reps = self.run_ops([
            pb.OpRequest(method=self.M + "NoSuch", request=b""),
            pb.OpRequest(method=self.M + "Watch", request=b""),
            pb.OpRequest(method=self.M + "Ops", request=b""),
            pb.OpRequest(method="/wsbridge.v1.Exec/List", request=b""),
            pb.OpRequest(method=self.M + "Stat", request=b"\xff\xff\xff"),
            self.op("Stat", pb.StatRequest(path=b"")),
        ])
        self.assertEqual([r.code for r in reps[:5]],
                         [SC.UNIMPLEMENTED.value[0]] * 4 + [SC.INVALID_ARGUMENT.value[0]])
        self.assertIn("NoSuch", reps[0].message)
        self.assertEqual(reps[4].errno_name, "EBADMSG")
        self.assertEqual(reps[5].code, 0)  # the stream goes on

    def test_fields_in_any_order_and_size(self):
        """agentd reads an OpRequest's fields in place, in one pass: any
        order, the last of a repeated field, a name too long for any
        method, and a 1 MiB Write whose data arrives in many pieces."""
        def raw(*parts):  # fields concatenate, as protobuf merges messages
            return b"".join(p.SerializeToString() for p in parts)

        with open(rp("ops-order.txt"), "wb") as f:
            f.write(b"12345")
        stat = pb.StatRequest(path=b"ops-order.txt").SerializeToString()
        data = bytes((i * 7 + i // 4099) & 0xff for i in range(1 << 20))
        ch = wsbtest.channel()
        try:
            call = ch.stream_stream(self.M + "Ops")
            h = self.ws.Open(pb.OpenRequest(path=b"ops-big.bin", access=pb.RDWR, create=True,
                                            mode=0o600), timeout=TIMEOUT).handle
            write = pb.WriteRequest(handle=h, offset=3, data=data).SerializeToString()
            outs = [pb.OpReply.FromString(b) for b in call(iter([
                raw(pb.OpRequest(request=stat), pb.OpRequest(method=self.M + "Stat")),
                raw(pb.OpRequest(method=self.M + "Stat", request=b"\xff\xff"),
                    pb.OpRequest(request=stat)),
                raw(pb.OpRequest(method="/wsbridge.v1.Workspace/" + "S" * 300)),
                raw(pb.OpRequest(method=self.M + "Write", request=write)),
            ]), timeout=TIMEOUT)]
        finally:
            ch.close()
        self.assertEqual([o.code for o in outs],
                         [0, 0, SC.UNIMPLEMENTED.value[0], 0])
        for o in outs[:2]:
            self.assertEqual(pb.StatReply.FromString(o.reply).attr.size, 5)
        self.assertIn("SSSS", outs[2].message)
        self.assertEqual(pb.WriteReply.FromString(outs[3].reply).written, len(data))
        self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT)
        with open(rp("ops-big.bin"), "rb") as f:
            self.assertEqual(f.read(), b"\0\0\0" + data)

    def test_not_an_op_request_ends_the_stream(self):
        ch = wsbtest.channel()
        try:
            call = ch.stream_stream(self.M + "Ops")
            with self.assertRaises(grpc.RpcError) as cm:
                list(call(iter([b"\x0a\xff"]), timeout=TIMEOUT))
            self.assertEqual((cm.exception.code(), trailer(cm.exception)),
                             (SC.INVALID_ARGUMENT, "EBADMSG"))
        finally:
            ch.close()


@unittest.skipUnless(os.environ.get("WSB_MAX_HANDLES") == "8", "agentd --max-handles 8 only")
class Handles(Base):
    def test_no_session_takes_half_the_table(self):
        """Handles of no session live until Release: they may fill half the
        table, and the refusal says so (it said agentd was out of file
        descriptors); calls that name a session have the other half."""
        with open(os.path.join(wsbtest.env("WSB_ROOT"), "hf"), "w") as fh:
            fh.write("x")
        req = pb.OpenRequest(path=b"hf", access=pb.RDONLY)
        mine = [self.ws.Open(req, timeout=TIMEOUT).handle for _ in range(4)]
        e = self.fails(SC.RESOURCE_EXHAUSTED, "ENFILE",
                       lambda: self.ws.Open(req, timeout=TIMEOUT), "a fifth of no session")
        self.assertIn("of no session", e.details())
        md = (("wsbridge-session", "handles-test"),)
        theirs = [self.ws.Open(req, timeout=TIMEOUT, metadata=md).handle for _ in range(4)]
        self.fails(SC.RESOURCE_EXHAUSTED, "ENFILE",
                   lambda: self.ws.Open(req, timeout=TIMEOUT, metadata=md), "past the table")
        for h in mine:
            self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT)
        for h in theirs:
            self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT, metadata=md)


@unittest.skipUnless(os.environ.get("WSB_MAX_REPLY"), "agentd runs without a small "
                     "--max-reply-bytes (workspace.bats starts one with it)")
class ReplyBudget(Base):
    """agentd holds at most --max-reply-bytes (WSB_MAX_REPLY) of replies its
    clients have not read, of the pure reads it may refuse: 800 Ops streams
    each with an unread 1 MiB Read took it to 672 MB before."""
    M = "/wsbridge.v1.Workspace/"

    def rss_kib(self):
        with open("/proc/%s/status" % wsbtest.env("WSB_AGENTD_PID")) as f:
            return int(f.read().split("VmRSS:")[1].split()[0])

    def test_reservations_refuse_no_read(self):
        """What running ExecuteCommands calls set aside for their
        transcripts grows with them and refuses no other reply: with
        twelve quiet calls running under an 8 MiB budget a 1 MiB Read is
        answered (before: refused, nothing being unread) and all twelve
        run (before: two, 4 MiB set aside each); one with 3 MB of output
        keeps it whole."""
        mib = 1 << 20
        with open(rp("reserve.bin"), "wb") as f:
            f.write(os.urandom(mib))
        h = self.ws.Open(pb.OpenRequest(path=b"reserve.bin", access=pb.RDONLY),
                         timeout=TIMEOUT).handle
        da = wsbtest.devagent_pb2_grpc.ManageAgentOpsStub(self.ch)
        slow = wsbtest.devagent_pb2.ExecuteCommandsRequest(cmds=["sleep 2"], app_name="reserve")
        running = [da.ExecuteCommands.future(slow, timeout=TIMEOUT) for _ in range(12)]
        time.sleep(1)
        try:
            self.assertEqual(len(self.ws.Read(pb.ReadRequest(handle=h, offset=0, size=mib),
                                              timeout=TIMEOUT).data), mib)
            big = da.ExecuteCommands(wsbtest.devagent_pb2.ExecuteCommandsRequest(
                cmds=["head -c 900000 /dev/zero | tr '\\0' Q"] * 3, app_name="reserve"),
                timeout=TIMEOUT).status
            self.assertEqual(big.count("Q" * 900000), 3, "transcript of %d bytes" % len(big))
        finally:
            for r in running:
                self.assertIn("[exit 0]", r.result().status)
            self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT)

    def test_unread_replies_are_bounded(self):
        budget, n, mib = int(os.environ["WSB_MAX_REPLY"]), 48, 1 << 20
        with open(rp("budget.bin"), "wb") as f:
            f.write(os.urandom(mib))
        h = self.ws.Open(pb.OpenRequest(path=b"budget.bin", access=pb.RDONLY),
                         timeout=TIMEOUT).handle
        read = pb.OpRequest(method=self.M + "Read", request=pb.ReadRequest(
            handle=h, offset=0, size=mib).SerializeToString())
        gate = threading.Event()

        def one_read():
            yield read
            gate.wait(TIMEOUT)
        # Without BDP probing a client announces no more window than it
        # reads: each reply stays in agentd until the stream is read.
        chans = [grpc.insecure_channel(wsbtest.env("WSB_TARGET"), options=[
            ("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", 64 << 20)])
            for _ in range(n)]
        rss0 = self.rss_kib()
        try:
            calls = [pbg.WorkspaceStub(c).Ops(one_read(), timeout=TIMEOUT) for c in chans]
            # Once the budget is full a large reply is refused, a small
            # one (Stat, a Write's) still goes.
            deadline = time.monotonic() + 10
            while True:
                try:
                    self.ws.Read(pb.ReadRequest(handle=h, offset=0, size=mib),
                                 timeout=TIMEOUT)
                except grpc.RpcError as e:
                    self.assertEqual((e.code(), trailer(e)), (SC.RESOURCE_EXHAUSTED, "ENOBUFS"),
                                     describe(e))
                    self.assertIn("--max-reply-bytes", e.details())
                    break
                self.assertLess(time.monotonic(), deadline,
                                "a 1 MiB Read still answered with %d unread" % n)
                time.sleep(0.1)
            # A wsfs mount's reads are refused too: it asks again while its
            # rpc_timeout lasts, and the reader gets its bytes once the
            # replies are read (not ENOBUFS or EIO).
            mnt = os.environ.get("WSB_MNT")
            if mnt:
                # 4 MiB: the mount reads 1 MiB at a time, and the budget
                # has less than that left.
                with open(rp("budget-cat.bin"), "wb") as f:
                    f.write(os.urandom(4 * mib))
                cat = subprocess.Popen(["sha256sum", os.path.join(mnt, "budget-cat.bin")],
                                       stdout=subprocess.PIPE)
                time.sleep(0.5)
                self.assertIsNone(cat.poll(), "a read on the mount did not wait for room")
            self.assertEqual(self.ws.Stat(pb.StatRequest(path=b"budget.bin"),
                                          timeout=TIMEOUT).attr.size, mib)
            # A Download goes on in chunks the budget has room for (before:
            # RESOURCE_EXHAUSTED at its first 1 MiB chunk).
            chunks = list(self.ws.Download(pb.DownloadRequest(path=b"budget.bin"),
                                           timeout=TIMEOUT))
            with open(rp("budget.bin"), "rb") as f:
                self.assertEqual(b"".join(c.data for c in chunks), f.read())
            self.assertGreater(len(chunks), 1, "one 1 MiB chunk past a full budget")
            self.assertEqual(len(self.ws.Read(pb.ReadRequest(handle=h, offset=0, size=1000),
                                              timeout=TIMEOUT).data), 1000)
            self.assertEqual(self.ws.Write(pb.WriteRequest(handle=self.ws.Open(pb.OpenRequest(
                path=b"budget-w.bin", access=pb.WRONLY, create=True, mode=0o600),
                timeout=TIMEOUT).handle, offset=0, data=b"w" * mib), timeout=TIMEOUT).written,
                mib)
            # Exec streams whose clients read nothing: each holds one chunk
            # of output in agentd, of no more than the budget has left
            # (before: up to 1 MiB each, past it), so the budget fills up;
            # then a reading exec's output waits for room, and comes whole
            # once there is room again.
            # (256 KiB each: their journals hold what they wrote, and
            # count in agentd's RSS below.)
            unread = [pbg.ExecStub(c).Start(pb.ExecRequest(
                shell=b"head -c 262144 /dev/zero"), timeout=TIMEOUT) for c in chans[:20]]
            time.sleep(1)
            got = [0]

            def run_exec():
                for ev in self.ex.Start(pb.ExecRequest(shell=b"head -c 2000000 /dev/zero"),
                                        timeout=TIMEOUT):
                    if ev.WhichOneof("event") == "stdout":
                        got[0] += len(ev.stdout.data)
            ex = threading.Thread(target=run_exec)
            ex.start()
            time.sleep(0.5)
            self.assertTrue(ex.is_alive() and got[0] < 2000000,
                            "an exec's output went past a full budget: %d bytes" % got[0])
            # A command with no output left ends at once: its exit is small
            # (before: it too waited for room).
            t0 = time.monotonic()
            evs = list(self.ex.Start(pb.ExecRequest(argv=[b"true"]), timeout=TIMEOUT))
            self.assertEqual(evs[-1].WhichOneof("event"), "exited")
            self.assertLess(time.monotonic() - t0, 2, "true's exit waited for room")
            # ExecuteCommands needs some room before it runs anything:
            # refused, nothing ran (before: it ran, and its transcript went
            # past the budget).
            da = wsbtest.devagent_pb2_grpc.ManageAgentOpsStub(self.ch)
            e = self.fails(SC.RESOURCE_EXHAUSTED, "ENOBUFS",
                           lambda: da.ExecuteCommands(wsbtest.devagent_pb2.ExecuteCommandsRequest(
                               cmds=["touch ran"], app_name="budget0"), timeout=TIMEOUT),
                           "ExecuteCommands with the budget full")
            self.assertIn("--max-reply-bytes", e.details())
            self.assertFalse(os.path.lexists(rp("budget0")), "a refused ExecuteCommands ran")
            # An Open is not refused (its handle would be lost); its
            # read-ahead (128 KiB) is left out: empty data, not data_eof
            # (before: it went past the budget). A small one still comes.
            o = self.ws.Open(pb.OpenRequest(path=b"budget.bin", access=pb.RDONLY,
                                            read_ahead=128 << 10), timeout=TIMEOUT)
            self.assertEqual((len(o.data), o.data_eof), (0, False))
            self.assertEqual(len(self.ws.Read(pb.ReadRequest(handle=o.handle, offset=0, size=1000),
                                              timeout=TIMEOUT).data), 1000)
            self.ws.Release(pb.HandleRequest(handle=o.handle), timeout=TIMEOUT)
            o = self.ws.Open(pb.OpenRequest(path=b"budget.bin", access=pb.RDONLY,
                                            read_ahead=4000), timeout=TIMEOUT)
            self.assertEqual(len(o.data), 4000)
            self.ws.Release(pb.HandleRequest(handle=o.handle), timeout=TIMEOUT)
            # A Watch stream's next batch waits for room too (before: it
            # went): READY comes, then a change made now does not, until
            # there is room again.
            watch = self.ws.Watch(pb.WatchRequest(), timeout=TIMEOUT)
            seen = queue.Queue()

            def run_watch():
                try:
                    for b in watch:
                        for ev in b.events:
                            seen.put(ev)
                except grpc.RpcError:
                    pass
            wt = threading.Thread(target=run_watch)
            wt.start()
            self.assertEqual(seen.get(timeout=TIMEOUT).kind, pb.WatchEvent.READY)
            with open(rp("budget-watched"), "w"):
                pass
            time.sleep(0.5)
            self.assertEqual([ev.path for ev in list(seen.queue)], [],
                             "a Watch batch went past a full budget")
            for u in unread:
                u.cancel()
            deadline = time.monotonic() + 5
            while seen.get(timeout=5).path != b"budget-watched":
                self.assertLess(time.monotonic(), deadline, "no event once there was room")
            watch.cancel()
            wt.join(TIMEOUT)
            # With less room than its output ExecuteCommands runs its
            # commands and keeps what fits: the rest is dropped with a
            # note, not held past the budget (before: all of it went).
            cmds = wsbtest.devagent_pb2.ExecuteCommandsRequest(
                cmds=["touch ran; head -c 1048576 /dev/zero | tr '\\0' Q"] * 2,
                app_name="budget")
            out = da.ExecuteCommands(cmds, timeout=TIMEOUT).status
            self.assertEqual(out.count("[1048576 bytes of output not kept"), 2, out[:400])
            self.assertEqual(out.count("[exit 0]"), 2, out[:400])
            self.assertTrue(os.path.exists(rp("budget/ran")))
            grown = self.rss_kib() - rss0
            # Each refused stream got its RESOURCE_EXHAUSTED; as many 1 MiB
            # replies as the budget holds were sent.
            reps = [next(c) for c in calls]
            if mnt:
                out, _ = cat.communicate(timeout=TIMEOUT)
                self.assertEqual(cat.returncode, 0)
                with open(rp("budget-cat.bin"), "rb") as f:
                    self.assertEqual(out.split()[0].decode(),
                                     hashlib.sha256(f.read()).hexdigest())
        finally:
            gate.set()
            for c in chans:
                c.close()
        ex.join(TIMEOUT)
        self.assertEqual(got[0], 2000000, "the exec's output once the budget had room")
        ok = [r for r in reps if r.code == 0]
        refused = [r for r in reps if r.code == SC.RESOURCE_EXHAUSTED.value[0]]
        self.assertEqual(len(ok) + len(refused), n, [(r.code, r.message) for r in reps])
        self.assertTrue(1 <= len(ok) <= budget // mib, "%d of %d 1 MiB replies sent with a "
                        "budget of %d bytes" % (len(ok), n, budget))
        self.assertEqual({r.errno_name for r in refused}, {"ENOBUFS"})
        for r in ok:
            self.assertEqual(len(pb.ReadReply.FromString(r.reply).data), mib)
        if os.environ.get("WSB_CHECK_RSS"):
            self.assertLess(grown, (budget + 24 * mib) // 1024,
                            "agentd grew %d KiB holding %d unread 1 MiB replies" % (grown, n))
        # Read, the budget is free again; ExecuteCommands runs, and its
        # transcript (2 MB) comes back whole.
        self.assertEqual(len(self.once_freed(lambda: self.ws.Read(
            pb.ReadRequest(handle=h, offset=0, size=mib), timeout=TIMEOUT), "a 1 MiB Read")
            .data), mib)
        out = self.once_freed(lambda: da.ExecuteCommands(cmds, timeout=TIMEOUT),
                              "ExecuteCommands").status
        self.assertEqual(out.count("Q" * 1048576), 2, "transcript of %d bytes" % len(out))
        self.ws.Release(pb.HandleRequest(handle=h), timeout=TIMEOUT)


if __name__ == "__main__":
    unittest.main(verbosity=2)
