"""Command handlers behind the dispatcher.

Only what every invocation needs is imported here; a pod without a block for
this network is answered from the raw config without pydantic or pyroute2.
"""

from __future__ import annotations

from typing import Any

from rdma_cni.cni import versions
from rdma_cni.cni.request import Request
from rdma_cni.confdefaults import BOUNDS, DEFAULTS
from rdma_cni.errors import ConfigError
from rdma_cni.models.annotation import our_blocks


def conf_name(conf: dict[str, Any]) -> str:
    name = conf.get("cniConfName", DEFAULTS["cniConfName"])
    if not isinstance(name, str) or not name:
        raise ConfigError("invalid network configuration: cniConfName must be a non-empty string")
    return name


def max_interfaces(conf: dict[str, Any]) -> int:
    value = conf.get("maxInterfaces", DEFAULTS["maxInterfaces"])
    low, high = BOUNDS["maxInterfaces"]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError("invalid network configuration: maxInterfaces must be an integer "
                          f"{low}-{high}")
    return value


def requested_blocks(req: Request) -> list[tuple[int, Any]]:
    return requested_blocks_of(req.conf)


def requested_blocks_of(conf: dict[str, Any]) -> list[tuple[int, Any]]:
    return our_blocks(conf, conf_name(conf), max_interfaces(conf))


def passthrough(req: Request) -> dict[str, Any]:
    return req.prev_result if req.prev_result is not None else versions.empty_result()


def _start_logging() -> None:
    """The real work logs through plain ``logging`` loggers: set up the handlers first."""
    from rdma_cni.log import get

    get()


class DefaultHandlers:
    def add(self, req: Request) -> dict[str, Any]:
        blocks = requested_blocks(req)
        if not blocks:
            return passthrough(req)
        _start_logging()
        from rdma_cni.cni.commands.add import cmd_add

        return cmd_add(req, blocks)

    def delete(self, req: Request) -> None:
        from rdma_cni.cni.commands.delete import cmd_del

        cmd_del(req)

    def check(self, req: Request) -> None:
        _start_logging()
        from rdma_cni.cni.commands.check import cmd_check

        cmd_check(req, requested_blocks(req))

    def status(self, req: Request) -> None:
        _start_logging()
        from rdma_cni.cni.commands.status import cmd_status

        cmd_status(req)

    def gc(self, req: Request) -> None:
        _start_logging()
        from rdma_cni.cni.commands.gc import cmd_gc

        cmd_gc(req)
