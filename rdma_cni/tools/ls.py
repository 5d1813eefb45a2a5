"""``rdma-cni ls [--json] [--config FILE] [--agent-status FILE]``: the RDMA attachments
on this node, read from the state store (pod, container, interface, NIC, address,
mode), and one ``no-rdma`` line per pod the agent found asking for RDMA interfaces
and having none (from the agent's status file)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rdma_cni.errors import CniError, escaped
from rdma_cni.models.subconfig import DEFAULT_CONF_DIR, data_dir_of, load_config
from rdma_cni.store.run import agentstatus
from rdma_cni.store.state import AttachmentState
from rdma_cni.store.view import StoreView

COLUMNS = ("pod", "container", "interface", "nic", "address", "mac", "mode", "status")


def _macs(state: AttachmentState) -> dict[str, str]:
    ifaces = (state.result or {}).get("interfaces")
    out: dict[str, str] = {}
    for i in ifaces if isinstance(ifaces, list) else []:
        if isinstance(i, dict) and isinstance(i.get("name"), str):
            out[i["name"]] = str(i.get("mac") or "")
    return out


def rows(states: Sequence[AttachmentState]) -> list[dict[str, str]]:
    """One row per pod interface of every attachment, sorted by pod then interface."""
    out = []
    for st in states:
        macs = _macs(st)
        for iface in st.interfaces:
            out.append({
                "pod": st.pod,
                "container": st.key.container_id if st.key else "",
                "network": st.key.network if st.key else "",
                "interface": iface.name,
                "nic": iface.nic,
                "address": ",".join(str(a) for a in iface.addresses),
                "mac": macs.get(iface.name, ""),
                "mode": st.mode,
                "status": st.status,
                "netns": st.netns,
            })
    out.sort(key=lambda r: (r["pod"], r["container"], r["interface"]))
    return out


def missing_rows(doc: dict[str, Any] | None, network: str) -> list[dict[str, str]]:
    """One ``no-rdma`` row per pod the agent reported without its RDMA interfaces."""
    out = []
    for item in agentstatus.pods_without_rdma(doc):
        out.append({"pod": str(item["pod"]), "container": "", "network": network,
                    "interface": "", "nic": "", "address": "", "mac": "", "mode": "",
                    "status": "no-rdma",
                    "netns": "", "note": f"asked for {item.get('blocks')} RDMA interface(s), "
                                         "has none"})
    return sorted(out, key=lambda r: r["pod"])


def render_table(table: Sequence[dict[str, str]]) -> str:
    def cell(row: dict[str, str], col: str) -> str:
        v = escaped(row.get(col, ""))  # names the runtime recorded: never raw to a terminal
        return (v[:12] if col == "container" else v) or "-"

    lines = [[c.upper() for c in COLUMNS]] + [[cell(r, c) for c in COLUMNS] for r in table]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )


def main(argv: Sequence[str] | None = None, conf_dir: str = DEFAULT_CONF_DIR) -> int:
    from rdma_cni.cliargs import fail, parser

    p = parser("rdma-cni ls", "List the RDMA attachments recorded in the data dir, and the "
               "pods the agent found asking for RDMA interfaces and having none.")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list (an {\"error\": ...} object on failure)")
    p.add_argument("--agent-status", default=agentstatus.DEFAULT_PATH,
                   help="the agent's status file, for pods without their RDMA interfaces "
                        f"(default {agentstatus.DEFAULT_PATH})")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        config = load_config(args.config, conf_dir)
    except CniError as e:
        if args.config:
            return fail("rdma-cni ls", e.msg, args.json)
        sys.stderr.write(f"rdma-cni ls: {e.msg}; using the default data dir\n")
        config = {}
    view = StoreView(data_dir_of(config))  # read-only: a listing never changes the data dir
    try:
        table = rows(view.states())
        table += missing_rows(agentstatus.read(args.agent_status), str(config.get("name") or ""))
    except CniError as e:
        return fail("rdma-cni ls", e.msg, args.json)
    if view.unreadable:
        sys.stderr.write(f"rdma-cni ls: {view.unreadable} state record(s) in "
                         f"{view.layout.state_dir} could not be read: not listed\n")
    sys.stdout.write(json.dumps(table, indent=2) + "\n" if args.json else render_table(table))
    return 0
