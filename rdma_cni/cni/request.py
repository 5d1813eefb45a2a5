"""One CNI invocation, validated: the command, its environment, the raw config.

Built by the dispatcher; handed to the command handlers. The pydantic model of
the config is built on first use only, so a pass-through ADD never pays for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rdma_cni.errors import EnvError
from rdma_cni.models.cniargs import CniArgs
from rdma_cni.vocab.attachment import AttachmentKey, instance_of
from rdma_cni.vocab.names import cni_ifname_ok

if TYPE_CHECKING:
    from rdma_cni.models.netconf import NetConf

# CNI spec: container ID is alphanumeric then [A-Za-z0-9_.-]*
_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
MAX_CONTAINER_ID = 1024
MAX_PATH = 4096


class Request:
    """A plain class (no dataclass machinery on the exec path)."""

    def __init__(self, command: str, conf: dict[str, Any], cni_version: str, *,
                 container_id: str = "", netns: str = "", ifname: str = "",
                 cni_path: str = "", args: CniArgs | None = None,
                 prev_result: dict[str, Any] | None = None) -> None:
        self.command = command
        self.conf = conf
        self.cni_version = cni_version
        self.container_id = container_id
        self.netns = netns
        self.ifname = ifname
        self.cni_path = cni_path
        self.args = args if args is not None else CniArgs()
        self.prev_result = prev_result
        #: the pod netns as an open descriptor (resident path); None: open CNI_NETNS
        self.netns_fd: int | None = None
        #: the resident path: true once the client gave up waiting (it runs the request
        #: itself then); checked under the store lock before any change
        self.abandoned: Callable[[], bool] | None = None
        self._netconf: NetConf | None = None

    @property
    def network(self) -> str:
        name = self.conf.get("name")
        return name if isinstance(name, str) else ""

    @property
    def key(self) -> AttachmentKey:
        return AttachmentKey(self.network, self.container_id, self.ifname, self.instance)

    @property
    def instance(self) -> str:
        """This entry's share of the key (see :mod:`rdma_cni.vocab.attachment`)."""
        return instance_of(self.conf)

    @property
    def netconf(self) -> NetConf:
        if self._netconf is None:
            from rdma_cni.models.netconf import load_netconf

            self._netconf = load_netconf(self.conf)
        return self._netconf


def check_container_id(value: str) -> str:
    if len(value) > MAX_CONTAINER_ID or not _CONTAINER_ID.fullmatch(value):
        raise EnvError(
            "invalid CNI_CONTAINERID: must start with a letter or digit and contain only "
            f"[A-Za-z0-9_.-], at most {MAX_CONTAINER_ID} characters"
        )
    return value


def check_ifname(value: str) -> str:
    if not cni_ifname_ok(value):
        raise EnvError(
            "invalid CNI_IFNAME: at most 15 bytes, not '.' or '..', "
            "without '/', ':', whitespace or NUL"
        )
    return value


def check_netns(value: str) -> str:
    if len(value) > MAX_PATH or not value.startswith("/") or "\x00" in value or "\n" in value:
        raise EnvError("invalid CNI_NETNS: must be an absolute path without NUL or newline")
    return value


def check_path(value: str) -> str:
    if len(value) > MAX_PATH * 4 or "\x00" in value:
        raise EnvError("invalid CNI_PATH: too long or contains NUL")
    return value
