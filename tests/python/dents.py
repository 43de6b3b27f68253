# SPDX-License-Identifier: Apache-2.0
"""getdents64(2) for the listing tests: readdir(3) in glibc hides what they
check (it takes ENOENT for the end, and its buffer decides where the
kernel resumes)."""
import ctypes
import os
import platform
import struct

_NR = {"x86_64": 217, "aarch64": 61}[platform.machine()]
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def getdents64(fd, size):
    """One getdents64 call on directory fd with a buffer of size bytes:
    [(name, d_off)], [] at the end; OSError on failure."""
    buf = ctypes.create_string_buffer(size)
    n = _libc.syscall(_NR, fd, buf, size)
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    out, p = [], 0
    while p < n:
        off, reclen = struct.unpack_from("<qH", buf.raw, p + 8)
        out.append((buf.raw[p + 19:p + reclen].split(b"\0")[0].decode(), off))
        p += reclen
    return out
