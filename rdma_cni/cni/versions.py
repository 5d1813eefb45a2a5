"""CNI spec versions and result conversion (pure, dict based, no heavy imports).

Results are built in the 1.1.0 form and converted to the requested version when
printed. A ``prevResult`` in any supported version is normalised to 1.1.0 on the
way in. Entries of other plugins are copied as they are: only the keys a version
does not know are dropped, and ``version`` is added to or removed from IPs.
"""

from __future__ import annotations

from typing import Any

from rdma_cni import jsondoc
from rdma_cni.errors import DecodeError, VersionError, shown

SUPPORTED = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = "1.1.0"

# keys that exist only from 1.1.0 on (CNI spec, "Add interface and route fields")
_IFACE_KEYS_1_1 = ("mtu", "socketPath", "pciID")
_ROUTE_KEYS_1_1 = ("mtu", "advmss", "priority", "table", "scope")


def parse(version: str) -> tuple[int, int, int]:
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) < 6 for p in parts):
        raise VersionError(f"invalid cniVersion {shown(version)}: expected MAJOR.MINOR.PATCH")
    return int(parts[0]), int(parts[1]), int(parts[2])


def check_supported(version: object) -> str:
    if version is None or version == "":
        raise VersionError(f"missing cniVersion: set it to one of {', '.join(SUPPORTED)}")
    if not isinstance(version, str):
        raise VersionError(
            f"unsupported cniVersion {shown(version)}: supported versions are "
            f"{', '.join(SUPPORTED)}"
        )
    if version not in SUPPORTED:
        raise VersionError(
            f"incompatible CNI version {shown(version)}: supported versions are "
            f"{', '.join(SUPPORTED)}"
        )
    return version


def at_least(version: str, minimum: str) -> bool:
    return parse(version) >= parse(minimum)


def empty_result() -> dict[str, Any]:
    return {"cniVersion": LATEST, "interfaces": [], "ips": [], "routes": [], "dns": {}}


def normalize_prev_result(prev: object) -> dict[str, Any]:
    """Validate the shape of a prevResult (any supported version) and return it in 1.1.0 form."""
    if not isinstance(prev, dict):
        raise DecodeError(f"failed to decode prevResult: expected an object, got {_kind(prev)}")
    _check_prev_version(prev.get("cniVersion"))
    out = jsondoc.copied(prev)
    for key in ("interfaces", "ips", "routes"):
        value = out.get(key)
        if value is None:
            out.pop(key, None)
            continue
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            raise DecodeError(f"failed to decode prevResult: {key} must be a list of objects")
    if "dns" in out and out["dns"] is not None and not isinstance(out["dns"], dict):
        raise DecodeError("failed to decode prevResult: dns must be an object")
    for ip in out.get("ips", []):
        ip.pop("version", None)
        if not isinstance(ip.get("address"), str):
            raise DecodeError("failed to decode prevResult: every ips entry needs an address")
        _check_index(ip, len(out.get("interfaces", [])))
    out["cniVersion"] = LATEST
    return out


def _check_prev_version(version: object) -> None:
    """libcni hands prevResult over in the config's version. One without a version is
    taken as in it, as libcni's ParsePrevResult does; one in another supported version
    is converted (0.3.0 to 1.1.0 share one shape: only the IPs' ``version`` and 1.1.0's
    keys differ). Any other version (the ``ip4``/``ip6`` shape before 0.3.0, a garbled value)
    cannot be read: passed on relabelled, the runtime would find none of its addresses."""
    if version is None or version == "":
        return
    if not isinstance(version, str) or version not in SUPPORTED:
        raise VersionError(f"prevResult has cniVersion {shown(version)}, which this plugin "
                           f"cannot read: supported versions are {', '.join(SUPPORTED)}")


def _check_index(ip: dict[str, Any], n_interfaces: int) -> None:
    idx = ip.get("interface")
    if idx is None:
        return
    if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < n_interfaces:
        raise DecodeError(f"failed to decode prevResult: ips interface index {shown(idx)} "
                          "is invalid")


def convert(result: dict[str, Any], to_version: str) -> dict[str, Any]:
    """Convert a 1.1.0-form result to ``to_version`` (one of SUPPORTED)."""
    check_supported(to_version)
    out = jsondoc.copied(result)
    out["cniVersion"] = to_version
    if to_version == LATEST:
        return out
    for iface in out.get("interfaces", []):
        for key in _IFACE_KEYS_1_1:
            iface.pop(key, None)
    for route in out.get("routes", []):
        for key in _ROUTE_KEYS_1_1:
            route.pop(key, None)
    if parse(to_version) < (1, 0, 0):
        for ip in out.get("ips", []):
            ip["version"] = "6" if ":" in str(ip.get("address", "")) else "4"
    return out


def _kind(value: object) -> str:
    return type(value).__name__ if value is not None else "null"
