# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the grpcio client tests.

Run with Debian's /usr/bin/python3 (python3-grpcio 1.51). The generated stubs
live in $WSB_PROTO (the build's proto/ directory); the bats driver puts it on
PYTHONPATH, and this module adds it too so a script also runs by hand.

Environment, set by the bats driver:
  WSB_TARGET  gRPC target of a running agentd: 127.0.0.1:PORT or unix:/path
  WSB_ROOT    its workspace root (a directory this process may also touch)
  WSB_TOKEN   bearer token agentd requires, if any
"""
import os
import sys

_proto = os.environ.get("WSB_PROTO")
if _proto and _proto not in sys.path:
    sys.path.insert(0, _proto)

import grpc  # noqa: E402

import devagent_pb2  # noqa: E402,F401
import devagent_pb2_grpc  # noqa: E402,F401
import health_pb2  # noqa: E402,F401
import health_pb2_grpc  # noqa: E402,F401
import wsbridge_pb2 as pb  # noqa: E402,F401
import wsbridge_pb2_grpc as pbg  # noqa: E402,F401

ERRNO_KEY = "wsbridge-errno"
# Deadline of every call a test makes, seconds: nothing may hang a suite.
TIMEOUT = 15


def env(name, default=None):
    v = os.environ.get(name, default)
    if v is None:
        sys.exit("%s is not set (run this through the bats suite)" % name)
    return v


def channel(target=None):
    """An insecure channel to agentd that accepts messages up to 64 MiB."""
    return grpc.insecure_channel(
        target or env("WSB_TARGET"),
        options=[("grpc.max_receive_message_length", 64 << 20)])


def auth_md(token=None):
    """Call metadata carrying the bearer token, or None without one."""
    token = token if token is not None else os.environ.get("WSB_TOKEN")
    return (("authorization", "Bearer " + token),) if token else None


def trailer(err, key=ERRNO_KEY):
    """Value of trailing-metadata @key of a failed call, or None."""
    try:
        md = err.trailing_metadata() or ()
    except Exception:  # not a grpc.Call
        return None
    for k, v in md:
        if k == key:
            return v
    return None


def describe(err):
    """One line: STATUS [errno] 'message'."""
    return "%s [%s] %r" % (err.code().name, trailer(err), err.details())


def drain(it):
    """Read a server stream to its end; returns the list of messages."""
    return list(it)


def root_path(*parts):
    return os.path.join(env("WSB_ROOT"), *parts)
