# SPDX-License-Identifier: Apache-2.0
"""Dev_Agent compatibility: ManageAgentOps called exactly as Dev_Agent calls it.

Dev_Agent builds its stubs from devagent.proto and calls:
  stub = devagent_pb2_grpc.ManageAgentOpsStub(channel)
  stub.CreateFiles(devagent_pb2.CreateFileRequest(files=[...], contents=[...], app_name=...))
  stub.ExecuteCommands(devagent_pb2.ExecuteCommandsRequest(cmds=[...], app_name=...,
                                                           load_from_file=False))
  stub.ViewFile(devagent_pb2.ViewFileRequest(path=...))

Environment: WSB_TARGET, WSB_ROOT (agentd's root, which this process can
read), WSB_VIEW_LIMIT (the --view-limit agentd was started with), and
WSB_TOKEN when agentd requires one. Run by tests/integration/devagent.bats,
over TCP and over a stdio tunnel (socat + agentd --stdio).
"""
import os
import re
import stat
import time
import unittest

import grpc

import wsbtest
from wsbtest import auth_md, describe, devagent_pb2, devagent_pb2_grpc

TIMEOUT = wsbtest.TIMEOUT
ROOT = wsbtest.env("WSB_ROOT")
VIEW_LIMIT = int(wsbtest.env("WSB_VIEW_LIMIT"))


class DevAgent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ch = wsbtest.channel()
        cls.stub = devagent_pb2_grpc.ManageAgentOpsStub(cls.ch)
        cls.md = auth_md()

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()

    def create(self, files, contents, app_name):
        return self.stub.CreateFiles(
            devagent_pb2.CreateFileRequest(files=files, contents=contents, app_name=app_name),
            timeout=TIMEOUT, metadata=self.md)

    def execute(self, cmds, app_name, load_from_file=False):
        r = self.stub.ExecuteCommands(
            devagent_pb2.ExecuteCommandsRequest(cmds=cmds, app_name=app_name,
                                                load_from_file=load_from_file),
            timeout=TIMEOUT, metadata=self.md)
        return r.status

    def view(self, path):
        return self.stub.ViewFile(devagent_pb2.ViewFileRequest(path=path), timeout=TIMEOUT,
                                  metadata=self.md).code

    def assertFails(self, code, fn, what):
        with self.assertRaises(grpc.RpcError, msg=what) as cm:
            fn()
        self.assertEqual(cm.exception.code(), code, "%s: %s" % (what, describe(cm.exception)))
        return cm.exception

    def assertInOrder(self, text, parts):
        """Each of parts occurs in text, each after the previous one."""
        pos = 0
        for p in parts:
            i = text.find(p, pos)
            self.assertGreaterEqual(i, 0, "%r not found (in order) after offset %d of:\n%s"
                                    % (p, pos, text))
            pos = i + len(p)

    # CreateFiles

    def test_create_files(self):
        files = ["main.py", "pkg/__init__.py", "pkg/deep/er/mod.py", "empty.txt", "üñí.txt"]
        contents = ["print('hi')\n", "", "X = 1\nY = 'ä€'\n", "", "unicode name\n"]
        r = self.create(files, contents, "app1")
        self.assertEqual(r.status, "success")
        for f, c in zip(files, contents):
            with open(os.path.join(ROOT, "app1", f), "rb") as fh:
                self.assertEqual(fh.read(), c.encode(), f)
        # Overwrite replaces the whole file.
        r = self.create(["main.py"], ["x"], "app1")
        self.assertEqual(r.status, "success")
        with open(os.path.join(ROOT, "app1", "main.py"), "rb") as fh:
            self.assertEqual(fh.read(), b"x")
        # No temp files are left next to them.
        self.assertEqual(sorted(os.listdir(os.path.join(ROOT, "app1"))),
                         ["empty.txt", "main.py", "pkg", "üñí.txt"])
        self.assertEqual(sorted(os.listdir(os.path.join(ROOT, "app1", "pkg"))),
                         ["__init__.py", "deep"])

    def test_create_files_empty_app_name_is_root(self):
        r = self.create(["top.txt"], ["top\n"], "")
        self.assertEqual(r.status, "success")
        with open(os.path.join(ROOT, "top.txt")) as fh:
            self.assertEqual(fh.read(), "top\n")

    def test_create_files_mismatched_lengths(self):
        for files, contents in ((["a.txt", "b.txt"], ["only one"]),
                                (["a.txt"], ["one", "two"]),
                                ([], ["orphan"])):
            e = self.assertFails(grpc.StatusCode.INVALID_ARGUMENT,
                                 lambda: self.create(files, contents, "mismatch"),
                                 "CreateFiles %r %r" % (files, contents))
            self.assertTrue(e.details(), "INVALID_ARGUMENT without a message")
        self.assertFalse(os.path.exists(os.path.join(ROOT, "mismatch")),
                         "a rejected CreateFiles wrote something")

    def test_create_files_keeps_the_mode_of_a_file_written_over(self):
        # As open(path, "w") keeps it: a script stays executable (before:
        # 0644, and ./run.sh then failed with Permission denied).
        self.create(["run.sh"], ["#!/bin/sh\necho one\n"], "keep")
        os.chmod(os.path.join(ROOT, "keep", "run.sh"), 0o750)
        self.create(["run.sh", "new.txt"], ["#!/bin/sh\necho two\n", "n"], "keep")
        self.assertEqual(os.stat(os.path.join(ROOT, "keep", "run.sh")).st_mode & 0o7777, 0o750)
        self.assertEqual(os.stat(os.path.join(ROOT, "keep", "new.txt")).st_mode & 0o7777, 0o644)
        self.assertIn("two", self.execute(["./run.sh"], "keep"))

    def test_nul_in_strings_refused(self):
        # A NUL character is valid in a proto3 string, but agentd's strings
        # end at the first NUL: refused, nothing written or run (before:
        # "a\0b" wrote "a", a name "x\0y" wrote x, a command ran in part).
        for files, contents in ((["nul.txt"], ["a\x00b"]), (["x\x00y"], ["c"])):
            e = self.assertFails(grpc.StatusCode.INVALID_ARGUMENT,
                                 lambda: self.create(files, contents, "nul"),
                                 "CreateFiles %r %r" % (files, contents))
            self.assertIn("NUL", e.details())
        self.assertFalse(os.path.exists(os.path.join(ROOT, "nul")), "a refused call wrote")
        self.assertFails(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.execute(["touch first\x00; touch second"], "nulx"),
                         "ExecuteCommands with a NUL")
        self.assertFalse(os.path.exists(os.path.join(ROOT, "nulx")), "a refused call ran")

    def test_dotdot_past_missing_directories(self):
        # A '..' after a directory that does not exist yet is refused
        # before anything is made: where it leads depends on what is made
        # first (before: first.txt and nd were written, then the escape
        # through elink refused).
        os.makedirs(os.path.join(ROOT, "dd"), exist_ok=True)
        os.symlink("/etc", os.path.join(ROOT, "dd", "elink"))
        e = self.assertFails(grpc.StatusCode.INVALID_ARGUMENT,
                             lambda: self.create(["first.txt", "nd/../elink/x"], ["1", "2"], "dd"),
                             "CreateFiles through a missing directory and ..")
        self.assertIn("files[1]", e.details())
        self.assertEqual(sorted(os.listdir(os.path.join(ROOT, "dd"))), ["elink"])
        self.assertFails(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.execute(["true"], "dd/nd9/../elink"),
                         "ExecuteCommands in a missing directory and ..")
        self.assertEqual(sorted(os.listdir(os.path.join(ROOT, "dd"))), ["elink"])
        # With the directories there, '..' is taken as the walk finds it.
        os.makedirs(os.path.join(ROOT, "dd", "real"))
        self.assertEqual(self.create(["real/../ok.txt"], ["ok"], "dd").status, "success")
        with open(os.path.join(ROOT, "dd", "ok.txt")) as f:
            self.assertEqual(f.read(), "ok")

    def test_create_files_empty_name(self):
        self.assertFails(grpc.StatusCode.INVALID_ARGUMENT,
                         lambda: self.create(["ok.txt", ""], ["a", "b"], "emptyname"),
                         "CreateFiles with an empty file name")
        self.assertFalse(os.path.exists(os.path.join(ROOT, "emptyname", "ok.txt")),
                         "a rejected CreateFiles wrote part of its files")

    def test_create_files_stops_at_its_deadline(self):
        # One request may name a great many files: agentd stops writing once
        # the caller's deadline passed (it wrote all 400,000 of four calls
        # that had given up after 5 s, its threads busy for minutes).
        n = 200000
        names = ["f%d" % i for i in range(n)]
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.CreateFiles(devagent_pb2.CreateFileRequest(
                files=names, contents=["x"] * n, app_name="many"), timeout=0.5,
                metadata=self.md)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED,
                         describe(cm.exception))
        d = os.path.join(ROOT, "many")
        count = lambda: len(os.listdir(d)) if os.path.isdir(d) else 0
        deadline, last = time.monotonic() + 20, -1
        while time.monotonic() < deadline:
            now = count()
            if now == last:
                break
            last = now
            time.sleep(1)
        self.assertLess(last, n, "agentd wrote every file after the deadline")
        self.assertEqual(count(), last, "agentd still writes files 20 s after the deadline")
        # It still answers, and the next call works.
        self.assertEqual(self.create(["after.txt"], ["after\n"], "many").status, "success")

    # ExecuteCommands

    def test_execute_commands_transcript(self):
        self.create(["seed.txt"], ["seed\n"], "app2")
        cmds = ["echo first", "cat seed.txt", "echo to-stderr >&2; exit 3", "pwd",
                "echo last"]
        out = self.execute(cmds, "app2")
        app = os.path.realpath(os.path.join(ROOT, "app2"))
        self.assertInOrder(out, [
            "echo first", "first\n", "[exit 0]",
            "cat seed.txt", "seed\n", "[exit 0]",
            "echo to-stderr >&2; exit 3", "to-stderr\n", "[exit 3]",
            "pwd", app + "\n", "[exit 0]",
            "echo last", "last\n", "[exit 0]"])
        self.assertEqual(out.count("[exit "), 5, out)

    def test_execute_commands_many_chatty(self):
        # 40 commands of 1 MiB each: the reply keeps the head and the tail
        # with the bytes between counted, and agentd holds no more than
        # that while they run (before: all 40 MiB, then three times that).
        pid = os.environ.get("WSB_AGENTD_PID")
        if pid:
            with open("/proc/%s/clear_refs" % pid, "w") as fh:
                fh.write("5")  # reset VmHWM (proc(5))
        self.create(["x"], [""], "chatty")
        cmd = "head -c 1048576 /dev/zero | tr '\\0' a"
        out = self.execute(["echo first"] + [cmd] * 40 + ["echo last"], "chatty")
        self.assertLessEqual(len(out.encode()), 4 * 1024 * 1024 - 64 * 1024 + 128)
        m = re.search(r"\n?\[\.\.\. (\d+) bytes of output omitted \.\.\.\]\n", out)
        self.assertIsNotNone(m, out[:200])
        # The transcript (cmds_add_output() ends an output with a newline),
        # of which the reply keeps the head and the tail, and counts the
        # rest.
        raw = ("$ echo first\nfirst\n[exit 0]\n" +
               ("$ %s\n%s\n[exit 0]\n" % (cmd, "a" * 1048576)) * 40 +
               "$ echo last\nlast\n[exit 0]\n")
        head, tail = out[:m.start()], out[m.end():]
        self.assertTrue(raw.startswith(head), head[:200])
        self.assertTrue(raw.endswith(tail), tail[-200:])
        self.assertEqual(len(head) + int(m.group(1)) + len(tail), len(raw))
        if pid:
            with open("/proc/%s/status" % pid) as fh:
                hwm = int(re.search(r"VmHWM:\s+(\d+) kB", fh.read()).group(1))
            self.assertLess(hwm, 64 * 1024, "agentd's peak RSS %d KiB" % hwm)

    def test_execute_commands_in_order_with_side_effects(self):
        self.create(["x"], [""], "app3")
        out = self.execute(["echo a > log", "false", "echo b >> log", "cat log"], "app3")
        self.assertInOrder(out, ["false", "[exit 1]", "cat log", "a\nb\n", "[exit 0]"])
        with open(os.path.join(ROOT, "app3", "log")) as fh:
            self.assertEqual(fh.read(), "a\nb\n")

    def test_execute_commands_shell(self):
        # Each command is a /bin/sh -c string: pipes, variables, globs.
        # (printf, not ls: Debian's ls calls statx(AT_NO_AUTOMOUNT), which
        # gVisor 0.0~20221219 refuses with EINVAL; docs/gvisor.md.)
        self.create(["a.c", "b.c", "c.h"], ["", "", ""], "app4")
        out = self.execute(["printf '%s\\n' *.c | wc -l", "X=42; echo \"x=$X\""], "app4")
        self.assertInOrder(out, ["2\n", "[exit 0]", "x=42\n", "[exit 0]"])

    def test_execute_commands_background_job(self):
        # A command that starts a job in the background (a server, `&`)
        # ends when the shell does, 1 s later at most: the job holds the
        # output pipe, and the call waited for it (until the 10-minute
        # timeout, which then killed the job). The job runs on, and the
        # next command sees it.
        self.create(["x"], [""], "bg")
        t0 = time.monotonic()
        out = self.execute(["sleep 300 & echo $! > job.pid; echo started; exit 4",
                            "kill -0 \"$(cat job.pid)\" && echo job-alive"], "bg")
        took = time.monotonic() - t0
        self.assertLess(took, 10, out)
        self.assertInOrder(out, ["started\n", "[exit 4]\n",
                                 "[what it started in the background still runs",
                                 "job-alive\n", "[exit 0]\n"])
        out = self.execute(["kill \"$(cat job.pid)\"; sleep 0.2; "
                            "kill -0 \"$(cat job.pid)\" 2>/dev/null || echo job-gone"], "bg")
        self.assertInOrder(out, ["job-gone\n", "[exit 0]\n"])

    @unittest.skipUnless(os.environ.get("WSB_MAX_PROCS") == "1", "agentd --max-procs 1 only")
    def test_execute_commands_at_the_process_limit(self):
        # The job left running holds agentd's one process: the next
        # command cannot start, and the ones after it are not tried (each
        # would fail the same; 3,000,000 of them held agentd's loop 86 s).
        self.create(["x"], [""], "limit")
        out = self.execute(["sleep 300 & echo $! > job.pid", "echo second", "echo third",
                            "echo fourth"], "limit")
        self.assertInOrder(out, ["[exit 0]\n", "[what it started in the background still runs",
                                 "$ echo second\n",
                                 "[not started: too many commands running (limit 1)]\n",
                                 "[2 more commands not run]\n"])
        self.assertNotIn("third", out)
        t0 = time.monotonic()
        out = self.execute(["echo x"] * 200000, "limit")
        self.assertLess(time.monotonic() - t0, 10)
        self.assertTrue(out.endswith("[not started: too many commands running (limit 1)]\n"
                                     "[199999 more commands not run]\n"), out[-300:])
        # (agentd's SIGTERM at the test's end ends the job)

    def test_execute_commands_missing_program(self):
        self.create(["x"], [""], "app5")
        out = self.execute(["no-such-program-wsb", "echo after"], "app5")
        self.assertInOrder(out, ["no-such-program-wsb", "[exit 127]", "echo after", "after\n",
                                 "[exit 0]"])

    def test_execute_commands_not_utf8(self):
        self.create(["x"], [""], "app6")
        # Invalid UTF-8 bytes in the output must not break decoding of the
        # proto3 string (Python rejects invalid UTF-8 in a string field).
        out = self.execute([r"printf 'A\377\376B\n'; printf '\300\n' >&2", "echo ok"], "app6")
        self.assertIsInstance(out, str)
        self.assertInOrder(out, ["A", "B\n", "[exit 0]", "echo ok", "ok\n", "[exit 0]"])

    def test_execute_commands_stdin_is_empty(self):
        # A command reading stdin must see EOF, not hang.
        self.create(["x"], [""], "app7")
        out = self.execute(["cat; echo done", "wc -c"], "app7")
        self.assertInOrder(out, ["done\n", "[exit 0]", "0\n", "[exit 0]"])

    def test_execute_commands_load_from_file(self):
        self.create(["commands.txt"], ["echo one\necho two > two.txt\ncat two.txt\n"], "app8")
        out = self.execute([], "app8", load_from_file=True)
        self.assertInOrder(out, ["echo one", "one\n", "[exit 0]",
                                 "echo two > two.txt", "[exit 0]",
                                 "cat two.txt", "two\n", "[exit 0]"])
        self.assertEqual(out.count("[exit "), 3, out)
        # cmds are ignored when load_from_file is set.
        out = self.execute(["echo ignored-cmd"], "app8", load_from_file=True)
        self.assertNotIn("ignored-cmd", out)

    def test_execute_commands_load_from_file_missing(self):
        self.create(["x"], [""], "app9")
        self.assertFails(grpc.StatusCode.NOT_FOUND,
                         lambda: self.execute([], "app9", load_from_file=True),
                         "load_from_file without commands.txt")

    def test_execute_commands_load_from_file_not_regular(self):
        """A commands.txt that is a FIFO, a directory or a device is
        refused before it is opened (a FIFO would block agentd's loop, a
        device be opened); one over 1 MiB too. Nothing runs."""
        self.create(["x"], [""], "app9b")
        path = os.path.join(ROOT, "app9b", "commands.txt")
        kinds = [("directory", lambda: os.mkdir(path))]
        # Made from the host: gVisor's gofer opens no FIFO or device the
        # host puts in the sandbox's workspace (EPERM).
        if not os.environ.get("WSB_RUNSC"):
            kinds.append(("FIFO", lambda: os.mkfifo(path)))
            if os.geteuid() == 0:
                kinds.append(("device", lambda: os.mknod(path, 0o600 | stat.S_IFCHR,
                                                          os.makedev(1, 3))))
        for what, make in kinds:
            make()
            e = self.assertFails(grpc.StatusCode.FAILED_PRECONDITION,
                                 lambda: self.execute([], "app9b", load_from_file=True),
                                 "commands.txt a " + what)
            self.assertIn("not a regular file", e.details())
            (os.rmdir if what == "directory" else os.unlink)(path)
        with open(path, "w") as f:
            f.write("echo big\n" * 120000)
        e = self.assertFails(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             lambda: self.execute([], "app9b", load_from_file=True),
                             "commands.txt over 1 MiB")
        self.assertIn("larger than", e.details())

    # ViewFile

    def test_view_file(self):
        self.create(["v.txt", "u.txt"], ["line 1\nline 2\n", "ä€😀\n"], "app10")
        self.assertEqual(self.view("app10/v.txt"), "line 1\nline 2\n")
        self.assertEqual(self.view("app10/u.txt"), "ä€😀\n")
        self.assertEqual(self.view("/app10/v.txt"), "line 1\nline 2\n")
        with open(os.path.join(ROOT, "empty_view.txt"), "w"):
            pass
        self.assertEqual(self.view("empty_view.txt"), "")

    def test_view_file_not_utf8(self):
        # "As text": either the text with the bad bytes replaced (so that it
        # still decodes in Python), or a clear FAILED_PRECONDITION naming
        # the file. Never a reply that Python cannot decode (INTERNAL).
        with open(os.path.join(ROOT, "bin_view.dat"), "wb") as fh:
            fh.write(b"ab\xff\xfecd\n")
        try:
            code = self.view("bin_view.dat")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, describe(e))
            self.assertIn("bin_view.dat", e.details())
            return
        self.assertIsInstance(code, str)
        self.assertTrue(code.startswith("ab") and code.endswith("cd\n"), repr(code))

    def test_view_file_errors(self):
        self.assertFails(grpc.StatusCode.NOT_FOUND, lambda: self.view("no/such/file.txt"),
                         "ViewFile of a missing file")
        os.makedirs(os.path.join(ROOT, "adir"), exist_ok=True)
        self.assertFails(grpc.StatusCode.FAILED_PRECONDITION, lambda: self.view("adir"),
                         "ViewFile of a directory")

    def test_view_file_limit(self):
        with open(os.path.join(ROOT, "at_limit.txt"), "w") as fh:
            fh.write("x" * VIEW_LIMIT)
        with open(os.path.join(ROOT, "over_limit.txt"), "w") as fh:
            fh.write("x" * (VIEW_LIMIT + 1))
        self.assertEqual(self.view("at_limit.txt"), "x" * VIEW_LIMIT)
        e = self.assertFails(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             lambda: self.view("over_limit.txt"), "ViewFile over the limit")
        self.assertTrue(re.search(r"\b%d\b" % VIEW_LIMIT, e.details() or ""),
                        "the message does not give the limit %d: %r"
                        % (VIEW_LIMIT, e.details()))

    # Method paths

    def test_method_paths(self):
        # The generated stubs use exactly these paths; call them by hand too,
        # with hand-serialised requests, as any other client would.
        raw = lambda path, req, reply: reply.FromString(self.ch.unary_unary(path)(
            req.SerializeToString(), timeout=TIMEOUT, metadata=self.md))
        r = raw("/ManageAgentOps/CreateFiles",
                devagent_pb2.CreateFileRequest(files=["at_path.txt"], contents=["hello"],
                                               app_name="rawapp"),
                devagent_pb2.CreateFileResponse)
        self.assertEqual(r.status, "success")
        r = raw("/ManageAgentOps/ViewFile", devagent_pb2.ViewFileRequest(path="rawapp/at_path.txt"),
                devagent_pb2.ViewFileResponse)
        self.assertEqual(r.code, "hello")
        r = raw("/ManageAgentOps/ExecuteCommands",
                devagent_pb2.ExecuteCommandsRequest(cmds=["cat at_path.txt"], app_name="rawapp"),
                devagent_pb2.ExecuteCommandsResponse)
        self.assertInOrder(r.status, ["cat at_path.txt", "hello", "[exit 0]"])
        req = devagent_pb2.ViewFileRequest(path="rawapp/at_path.txt").SerializeToString()
        for path in ("/manageagentops/ViewFile", "/ManageAgentOps/viewfile",
                     "/MANAGEAGENTOPS/VIEWFILE", "/ManageAgentOps/ViewFile/",
                     "/devagent.ManageAgentOps/ViewFile", "/ManageAgentOps/Nope",
                     "/ManageAgentOps/createFiles", "/ManageAgentOps/Executecommands"):
            call = self.ch.unary_unary(path)
            t0 = time.monotonic()
            e = self.assertFails(grpc.StatusCode.UNIMPLEMENTED,
                                 lambda: call(req, timeout=5, metadata=self.md), path)
            self.assertLess(time.monotonic() - t0, 2.0, "%s was not answered at once" % path)
            self.assertTrue(e.details() is not None)


if __name__ == "__main__":
    unittest.main(verbosity=2)
