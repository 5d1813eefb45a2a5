"""Where an attachment was made: the node and the network namespace (identity, not path).

Recorded at ADD in the state as ``origin`` (``{"node": ..., "machineId": ...,
"netnsDev": .., "netnsIno": .., "netnsDirDev": .., "netnsDirIno": ..}``) so the agent can

- refuse to act on state another node wrote (two nodes sharing a ``dataDir`` by
  mistake, e.g. an NFS-mounted /var/lib/cni): the node is its hostname (see
  :func:`node_identity`; the boot id would change at every reboot, and the state
  outlives reboots);
- look the pod's network namespace up by its nsfs identity (st_dev, st_ino)
  through ``/proc/<pid>/ns/net`` instead of trusting its own view of
  ``/var/run/netns``;
- tell whether the netns directory it sees is the one the runtime uses (the same
  directory: its (st_dev, st_ino) as ADD saw it), before it takes a netns missing
  there for a pod that is gone.

Pure stdlib and cheap: this runs on the ADD path.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from rdma_cni.adapters.fsops import dev_ino

if TYPE_CHECKING:
    from rdma_cni.store.state import AttachmentState

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def node_identity() -> str:
    """This node's name for the ``origin`` record: the hostname.

    Node names are unique in a cluster, and kubelet's default node name is the
    hostname, while ``/etc/machine-id`` is shared by nodes cloned from one image and
    differs inside the agent's container: it is recorded (``machineId``) for
    diagnosis, not compared. ``RDMA_CNI_NODE_ID`` overrides the hostname (tests,
    nodes whose hostname is not unique)."""
    return os.environ.get("RDMA_CNI_NODE_ID") or socket.gethostname()


def machine_id(root: str = "/") -> str:
    """systemd's machine ID ("" when there is none)."""
    for path in MACHINE_ID_FILES:
        try:
            with open(os.path.join(root, path.lstrip("/")), encoding="ascii") as f:
                value = f.read(64).strip()
        except (OSError, UnicodeDecodeError):
            continue
        if value:
            return value
    return ""


def same_node(writer: str | None, names: set[str]) -> bool:
    """Whether a record written by ``writer`` is this node's (``names``: what this node
    may be called: its identity, its Kubernetes node name). Records from before
    ``origin`` existed (None) count as this node's."""
    return writer is None or writer in names


def netns_identity(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of ``path`` when it is a mounted nsfs file (a live netns) or a
    /proc/<pid>/ns/net link; None for a plain file (an unmounted leftover, or a view
    without mount propagation) or when it cannot be read."""
    return _identities(path)[0]


def _identities(path: str) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """:func:`netns_identity` of ``path`` and (st_dev, st_ino) of its directory."""
    try:
        parent = os.stat(os.path.dirname(path) or "/")
    except OSError:
        return None, None
    directory = (parent.st_dev, parent.st_ino)
    try:
        st = os.stat(path)
    except OSError:
        return None, directory
    if st.st_dev == parent.st_dev and not path.startswith("/proc/"):
        return None, directory
    return (st.st_dev, st.st_ino), directory


def origin_of(netns: str, fd: int | None = None) -> dict[str, Any]:
    """The ``origin`` field ADD writes into the state. ``fd``: the pod's netns as the
    caller handed it over (``serve``): its identity is the pod's whatever this process
    sees at ``netns``, and the directory is recorded only when the path shows this very
    netns here (``serve``'s view of the directory could be another one: the agent, which
    takes a recorded directory for the runtime's, would then free live pods)."""
    out: dict[str, Any] = {"node": node_identity()}
    mid = machine_id()
    if mid:
        out["machineId"] = mid
    ident, directory = _identities(netns) if netns else (None, None)
    if fd is not None:
        given = dev_ino(fd)
        if ident is None or ident != given:
            directory = None
        ident = given
    if ident is not None:
        out["netnsDev"], out["netnsIno"] = ident
    if directory is not None and not netns.startswith("/proc/"):
        out["netnsDirDev"], out["netnsDirIno"] = directory
    return out


def recorded_node(state: AttachmentState) -> str | None:
    """The node that wrote ``state``; None for records from before ``origin`` existed."""
    origin = state.origin
    node = origin.get("node") if origin is not None else None
    return node if isinstance(node, str) and node else None


def recorded_netns(state: AttachmentState) -> tuple[int, int] | None:
    return _recorded(state, "netnsDev", "netnsIno")


def recorded_netns_dir(state: AttachmentState) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the netns directory as ADD saw it (None: not recorded)."""
    return _recorded(state, "netnsDirDev", "netnsDirIno")


def _recorded(state: AttachmentState, dev_key: str, ino_key: str) -> tuple[int, int] | None:
    origin = state.origin
    if origin is None:
        return None
    dev, ino = origin.get(dev_key), origin.get(ino_key)
    if isinstance(dev, int) and isinstance(ino, int) and ino > 0:
        return dev, ino
    return None
