"""A link deletion that returns once the kernel has unlisted the links, not once it has
freed them.

The kernel deletes a netdev in two parts. Under the RTNL lock it closes and unlists
the device: it leaves the netns's list of links, its addresses, routes and neighbours
go with it, and the netns's ``RTNLGRP_LINK`` listeners get an ``RTM_DELLINK``. After the
lock it waits for every RCU callback queued on the machine (``rcu_barrier`` in
``netdev_run_todo``) and for the device's last references, then frees it; the request's
acknowledgement comes only after that second part (18 to 27 ms on a quiet 2-core VM,
against 0.4 ms for the first). Nothing the pod or the node can see is left by then.

:func:`delete_unlisted` sends the ``RTM_DELLINK`` from a thread of its own (on a socket
it makes in the links' netns) and returns as soon as every link is unlisted: a kernel
``RTM_DELLINK`` notification for each link's index (the sender's port id 0: only the
kernel's own; a process in the pod with ``CAP_NET_ADMIN`` can multicast too), confirmed
by the caller's look-up of each index finding nothing. The thread finishes the kernel's
second part by itself; a refusal before the links are unlisted is raised here as the
request's own would be. When the notifications cannot be trusted to have been seen (the
listener's buffer overflowed, a link came back under its index), this waits for the
request's answer, as a plain request does. When no thread, pipe or socket can be made
for it (a pids or descriptor limit, an unusable netns descriptor), :class:`SetupError`
says so and nothing was sent: the caller sends the request itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from rdma_cni.adapters import netns
from rdma_cni.adapters.rtnl import RTM_DELLINK, Channel, ifinfmsg
from rdma_cni.adapters.rtnlcodec import NLMSG_HDR

#: RTMGRP_LINK: the bit of the RTNLGRP_LINK group in a netlink socket's bind address
RTMGRP_LINK = 1
#: an ifinfomsg's family and index (after its header)
_IFI = struct.Struct("=BxHi")
_BUF = 1 << 16

__all__ = ["SetupError", "delete_unlisted"]


class SetupError(Exception):
    """No thread, pipe or socket for the deletion could be made (a thread or descriptor
    limit, ...): nothing was sent, the caller sends the request itself."""


class _Deleter:
    """The request's thread: enters the netns, makes the listener and the request's
    socket, hands the listener over, then sends the request and records its outcome."""

    def __init__(self, netns_fd: int, attrs: Sequence[tuple[str, Any]]) -> None:
        self._fd = netns_fd
        self._attrs = list(attrs)
        self.ready = threading.Event()
        self.listener: socket.socket | None = None
        self.error: BaseException | None = None
        self._done_r, self._done_w = os.pipe2(os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._abandoned = False  # the caller left before the answer and closed its end
        self._thread = threading.Thread(target=self._run, name="rdma-cni-dellink")

    @property
    def done_fd(self) -> int:
        return self._done_r

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        chan: Channel | None = None
        try:
            try:
                netns.setns(self._fd)  # this thread only; it ends with the request
                listener = socket.socket(socket.AF_NETLINK,
                                         socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                         socket.NETLINK_ROUTE)
                try:
                    listener.bind((0, RTMGRP_LINK))
                    chan = Channel()
                except BaseException:
                    listener.close()
                    raise
                self.listener = listener
            except BaseException as exc:
                self.error = exc
                return
            finally:
                self.ready.set()
            try:
                chan.request(ifinfmsg, RTM_DELLINK, 0, self._attrs)
            except BaseException as exc:
                self.error = exc
        finally:
            if chan is not None:
                chan.close()
            with self._lock:
                if not self._abandoned:
                    with contextlib.suppress(OSError):
                        os.write(self._done_w, b"x")
            os.close(self._done_w)

    def finished(self, raising: bool = True) -> None:
        """Wait for the request's answer; raise its refusal."""
        self._thread.join()
        if raising and self.error is not None:
            raise self.error

    def abandon(self) -> None:
        """The thread never started: its end of the pipe is closed here."""
        os.close(self._done_w)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        with self._lock:
            self._abandoned = True
            os.close(self._done_r)


def delete_unlisted(netns_fd: int, attrs: Sequence[tuple[str, Any]], indexes: Collection[int],
                    absent: Callable[[int], bool]) -> None:
    """Send ``RTM_DELLINK`` with ``attrs`` in the netns ``netns_fd`` (a name or a link
    group) and return once every link of ``indexes`` (what the request deletes) is
    unlisted; ``absent(index)``: the caller's look-up of an index finds nothing. A
    refusal raises OSError with the kernel's errno, as :meth:`Channel.request` does."""
    try:
        deleter = _Deleter(netns_fd, attrs)
    except OSError as exc:
        raise SetupError(f"no pipe for the deletion's thread: {exc}") from None
    try:
        try:
            deleter.start()
        except RuntimeError as exc:  # "can't start new thread": a pids limit
            deleter.abandon()
            raise SetupError(f"no thread for the deletion: {exc}") from None
        deleter.ready.wait()
        if deleter.listener is None:  # the thread could not set up; nothing was sent
            deleter.finished(raising=False)
            raise SetupError(f"the deletion's thread could not set up: {deleter.error}")
        if _watch(deleter.listener, deleter.done_fd, set(indexes)) and all(
                absent(i) for i in indexes):
            return None  # the thread finishes the kernel's part and closes its socket
        return deleter.finished()
    finally:
        deleter.close()


def _watch(listener: socket.socket, done_fd: int, pending: set[int]) -> bool:
    """Read the kernel's link notifications until every index of ``pending`` was
    announced deleted (True) or the request was answered first, or the notifications
    can no longer be trusted to be complete (False)."""
    poller = select.poll()  # not select(): a busy server's descriptors go past 1024
    poller.register(listener.fileno(), select.POLLIN)
    poller.register(done_fd, select.POLLIN)
    while pending:
        ready = {fd for fd, _ in poller.poll()}
        if done_fd in ready:
            return False
        try:
            data, (sender, _groups) = listener.recvfrom(_BUF, socket.MSG_DONTWAIT)
        except BlockingIOError:
            continue
        except OSError:  # ENOBUFS: notifications were dropped
            return False
        if sender == 0:
            pending -= set(_deleted_indexes(data))
    return True


def _deleted_indexes(data: bytes) -> list[int]:
    """The indexes of the links an ``RTM_DELLINK`` notification datagram announces gone
    (family AF_UNSPEC: a bridge's port notice has AF_BRIDGE and leaves the link be)."""
    out: list[int] = []
    off = 0
    while off + NLMSG_HDR.size + _IFI.size <= len(data):
        length, kind, _flags, _seq, _pid = NLMSG_HDR.unpack_from(data, off)
        if length < NLMSG_HDR.size:
            break
        if kind == RTM_DELLINK and length >= NLMSG_HDR.size + _IFI.size:
            family, _type, index = _IFI.unpack_from(data, off + NLMSG_HDR.size)
            if family == socket.AF_UNSPEC:
                out.append(index)
        off += (length + 3) & ~3
    return out
