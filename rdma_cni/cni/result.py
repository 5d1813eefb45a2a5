"""Build the ADD result: prevResult with our interfaces, IPs and routes appended."""

from __future__ import annotations

from typing import Any

from rdma_cni import jsondoc
from rdma_cni.cni import versions
from rdma_cni.vocab.plan import IfacePlan


def our_part(plans: list[IfacePlan], macs: dict[str, str], sandbox: str) -> dict[str, Any]:
    interfaces, ips = [], []
    for i, p in enumerate(plans):
        interfaces.append({"name": p.name, "mac": macs.get(p.name, ""), "mtu": p.mtu,
                           "sandbox": sandbox})
        for addr in p.addresses:
            ip: dict[str, Any] = {"address": str(addr), "interface": i}
            if p.gateway is not None and p.gateway in addr.network:
                ip["gateway"] = str(p.gateway)
            ips.append(ip)
    return {"interfaces": interfaces, "ips": ips, "routes": []}


def append(prev: dict[str, Any] | None, ours: dict[str, Any]) -> dict[str, Any]:
    """Append ``ours`` (indices relative to our own interfaces) after prevResult's entries."""
    out = jsondoc.copied(prev) if prev is not None else versions.empty_result()
    out["cniVersion"] = versions.LATEST
    base = len(out.setdefault("interfaces", []))
    out["interfaces"] = out["interfaces"] + jsondoc.copied(ours["interfaces"])
    shifted = []
    for ip in ours["ips"]:
        ip = dict(ip)
        ip["interface"] = ip["interface"] + base
        shifted.append(ip)
    out["ips"] = (out.get("ips") or []) + shifted
    out["routes"] = (out.get("routes") or []) + list(ours.get("routes", []))
    out.setdefault("dns", {})
    return out
