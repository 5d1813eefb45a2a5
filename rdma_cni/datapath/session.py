"""The namespaces and netlink sockets of one invocation: one socket per netns,
reused by every step, closed at the end."""

from __future__ import annotations

import logging

from rdma_cni.adapters import netns
from rdma_cni.datapath.context import Ctx, NetnsOps
from rdma_cni.errors import EnvError
from rdma_cni.vocab.ports import NetlinkPort

log = logging.getLogger("rdma_cni")
#: the netns effects of every Session not given its own: the kernel's (the unit tests of
#: the command handlers, which make their Sessions themselves, put the fake here)
default_ops = NetnsOps()


class Session:
    def __init__(self, pod_path: str, *, pod_required: bool, fd: int | None = None,
                 ops: NetnsOps | None = None) -> None:
        self.pod_path = pod_path
        self._given_fd = fd
        self.ops = ops or default_ops
        self.host_fd = self.ops.host_fd()
        self.pod_fd: int | None = None
        self.host: NetlinkPort | None = None
        self.pod: NetlinkPort | None = None
        self._ctx: Ctx | None = None
        try:
            self._open_pod(pod_required)
            self.host = self.ops.here("the host")
        except BaseException:
            self.close()
            raise

    def _open_pod(self, required: bool) -> None:
        if not self.pod_path:
            if required:
                raise EnvError("CNI_NETNS is empty")
            return
        try:
            self.pod_fd = self.ops.open(self.pod_path, self._given_fd)
        except netns.NetnsGone:
            if required:
                raise EnvError(f"CNI_NETNS {self.pod_path} does not exist") from None
            return
        except EnvError:
            if required:
                raise
            return
        if self.ops.same(self.pod_fd, self.host_fd):
            if required:
                raise EnvError(f"CNI_NETNS {self.pod_path} is the plugin's own (host) netns")
            # DEL: never act on the node's own links as if they were the pod's
            log.warning("CNI_NETNS %s is the plugin's own (host) netns: state-only cleanup",
                        self.pod_path)
            self.ops.release(self.pod_fd)
            self.pod_fd = None
            return
        self.pod = self.ops.inside(self.pod_fd, self.host_fd, self.pod_path)

    @property
    def has_pod(self) -> bool:
        return self.pod is not None

    def ctx(self, marker: str, priority: int) -> Ctx:
        if self._ctx is None:
            assert self.host is not None and self.pod is not None and self.pod_fd is not None
            self._ctx = Ctx(self.host, self.pod, self.host_fd, self.pod_fd, self.pod_path,
                            marker, priority, ops=self.ops)
        return self._ctx

    def close(self) -> None:
        if self._ctx is not None:
            self._ctx.close()
        for nl in (self.pod, self.host):
            if nl is not None:
                nl.close()
        for fd in (self.pod_fd, self.host_fd):
            if fd is not None:
                self.ops.release(fd)
        self.pod_fd = None
