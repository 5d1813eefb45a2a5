"""The exec'd binary's side: forward one CNI request to the resident process.

Returns None whenever the request should run in-process instead: no socket,
connect refused, the server refuses (other netns, another view of the store or the
kubelet's files, draining), an answer that is no complete CNI answer (an ADD success
without its result), CNI_NETNS that is not a plain nsfs file, or no answer within the
deadline. Stdlib only: this runs on every exec.
"""

from __future__ import annotations

import array
import os
import socket
import stat
import time
from typing import Any

from rdma_cni.resident import protocol

CONNECT_TIMEOUT = 0.2
DEFAULT_REPLY_TIMEOUT = 25.0


def reply_timeout(value: str) -> float:
    """``RDMA_CNI_RESIDENT_TIMEOUT``: seconds, above 0 and at most an hour; anything else
    is the default, as the front reads it (front/rdma-cni-front.c, ``timeout_ms``)."""
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_REPLY_TIMEOUT
    return seconds if 0 < seconds <= 3600 else DEFAULT_REPLY_TIMEOUT


#: bounded wait for the whole answer; past it the request runs in-process (the store's
#: lock and ADD's idempotence make a late duplicate harmless)
REPLY_TIMEOUT = reply_timeout(os.environ.get("RDMA_CNI_RESIDENT_TIMEOUT", ""))


def forward(env: dict[str, str], stdin: bytes, path: str) -> dict[str, Any] | None:
    if not os.path.exists(path):
        return None
    fds = _fds(env)
    if fds is None:
        return None
    try:
        return _exchange(path, env, stdin, fds)
    except (OSError, ValueError):
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _fds(env: dict[str, str]) -> list[int] | None:
    """[this thread's netns, the root dir, the pod netns when CNI_NETNS is set]."""
    fds = [os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)]
    try:
        fds.append(os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        netns = env.get("CNI_NETNS", "")
        if netns:
            pod = _open_netns(netns)
            if pod is None:
                raise OSError("CNI_NETNS is no netns file")
            fds.append(pod)
    except OSError:
        for fd in fds:
            os.close(fd)
        return None  # in-process reports it (or DEL treats it as gone)
    return fds


def _open_netns(path: str) -> int | None:
    """The pod netns opened without ever blocking or opening a device: ``O_PATH`` first,
    then, for a regular file (what nsfs files are), a real descriptor of that very inode
    (the server verifies it is a network namespace). None for anything else."""
    probe = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(probe).st_mode):
            return None
        return os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    finally:
        os.close(probe)


def _exchange(
    path: str, env: dict[str, str], stdin: bytes, fds: list[int]
) -> dict[str, Any] | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(path)
        deadline = time.monotonic() + REPLY_TIMEOUT
        sock.settimeout(REPLY_TIMEOUT)
        fwd = {k: v for k, v in env.items() if k in protocol.FORWARDED}
        data = protocol.encode_request(fwd, stdin)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        sent = sock.sendmsg([data], anc)
        if sent < len(data):
            sock.sendall(data[sent:])
        reply = _read(sock, deadline)
    finally:
        sock.close()
    if reply is None or not protocol.relayable(env.get("CNI_COMMAND", ""), reply):
        return None
    return reply


def _read(sock: socket.socket, deadline: float) -> dict[str, Any] | None:
    """The reply, whole before ``deadline`` (a server sending a byte at a time does not
    stretch the wait); None past it, or for an answer that is no reply."""
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
        size = protocol.reply_size(buf)
        if size is not None and len(buf) >= size:
            return protocol.decode_reply(buf[:size])
        if len(buf) > protocol.MAX_FRAME:
            return None
