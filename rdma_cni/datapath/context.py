"""What every datapath step is given: the netlink ports of the host and the pod,
their netns fds, our mark and rule priority, and the netns effects that are not
netlink (a private netns for moving a NIC), behind :class:`NetnsOps`
so that unit tests run the steps over the in-memory fake."""

from __future__ import annotations

import os

from rdma_cni import defaults
from rdma_cni.adapters import netns
from rdma_cni.adapters.rdmanl import RdmaNetlink
from rdma_cni.records import field, record
from rdma_cni.vocab.ports import NetlinkPort


class NetnsOps:
    """The real netns effects: the namespaces of an invocation and a port into each."""

    def host_fd(self) -> int:
        return netns.host_fd()

    def open(self, path: str, given_fd: int | None) -> int:
        """The pod's netns (NetnsGone if the path is gone, EnvError if it is no netns)."""
        return netns.open_netns(path) if given_fd is None else netns.adopt_netns(given_fd, path)

    def same(self, fd_a: int, fd_b: int) -> bool:
        return netns.same_netns(fd_a, fd_b)

    def here(self, label: str) -> NetlinkPort:
        from rdma_cni.adapters.netlink import Netlink

        return Netlink.here(label)

    def inside(self, fd: int, home: int, label: str) -> NetlinkPort:
        from rdma_cni.adapters.netlink import Netlink

        return Netlink.inside(fd, home, label)

    def private(self, host_fd: int) -> tuple[int, NetlinkPort]:
        """A fresh netns no process lives in, and a port into it."""
        fd = netns.private_netns(host_fd)
        return fd, self.inside(fd, host_fd, "a private netns")

    def release(self, fd: int) -> None:
        os.close(fd)


@record(frozen=False)
class Ctx:
    host: NetlinkPort
    pod: NetlinkPort
    host_fd: int
    pod_fd: int
    pod_path: str
    marker: str
    priority: int = defaults.RULE_PRIORITY
    rdma: RdmaNetlink | None = None
    ops: NetnsOps = field(default_factory=NetnsOps, repr=False)
    #: plan k -> index, in the pod, of the link this request made (a sub-link) or moved in
    #: (an exclusive NIC): what a rollback may undo, by identity, and nothing else
    made: dict[int, int] = field(default_factory=dict)
    #: plan k -> index on the host of an exclusive NIC a rollback took home but left for
    #: DEL (under another name, or not restored): the identity its kept record names
    home: dict[int, int] = field(default_factory=dict)
    #: False once a rollback of the executor left something it could not undo
    undone_clean: bool = True
    _tmp: tuple[int, NetlinkPort] | None = field(default=None, repr=False)

    def tmpns(self) -> tuple[int, NetlinkPort]:
        if self._tmp is None:
            self._tmp = self.ops.private(self.host_fd)
        return self._tmp

    def rdma_nl(self) -> RdmaNetlink:
        if self.rdma is None:
            self.rdma = RdmaNetlink()
        return self.rdma

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp[1].close()
            self.ops.release(self._tmp[0])
            self._tmp = None
