"""Security of what the plugin writes (issue 27 items 2, 8, 10): nothing a pod author
or the runtime hands over forges a line of the plugin's log, `serve`'s log or stderr,
and the log file (pod names, namespaces, addresses) is private.

Oracle: the log files and stderr as written (every line a record of its own or an
indented traceback line, no raw control character), and the files' modes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from cnirunner import rdma_blocks, run_plugin
from security_rig import RAW_CONTROLS, STDERR_LINE, forged_lines
from support.resident import Serve
from support.rigs import Rig

pytestmark = pytest.mark.root
FORGED = "2026-01-01 00:00:00,000 1 INFO forged record: pod p1 got 198.51.100.9/26"
#: an unknown key that would write six complete records, then wipe the terminal line
KEY = "x\n" + "\n".join([FORGED] * 6) + "\r\x1b[2K\u2028"


def _block(where: str) -> dict[str, Any]:
    block: dict[str, Any] = {"cniConf": {"name": "rdma"}, "deviceConf": {"ifName": "eth1"}}
    target = block if where == "block" else block[where]
    target[KEY] = "v"
    return block


@pytest.mark.parametrize("where", ["block", "cniConf", "deviceConf"])
def test_annotation_key_cannot_forge_log_lines(faults: Any, rig: Rig, where: str) -> None:
    rig.nic()
    pod = rig.pod()
    add = faults.chain("shared-multi").add("c1", pod.path, [_block(where)])
    assert add.code == 7, add.out
    faults.expect_served("ADD", 1)
    assert "\n" not in add.out["msg"] and "\r" not in add.out["msg"], add.out["msg"]
    assert '"x\\n2026-01-01' in add.out["msg"]  # the key shown JSON-quoted
    log = faults.log_text()
    assert "Extra inputs are not permitted" in log
    assert forged_lines(log) == [], log
    for err in (add.err, faults.server.stderr if faults.server else ""):
        assert forged_lines(err, STDERR_LINE) == [], err
    assert sorted(pod.links()) == ["eth0", "lo"]


def test_netns_path_controls_are_escaped_on_stderr(rig: Rig, client: list[str] | None) -> None:
    """CNI_NETNS with a carriage return and terminal escapes: ADD answers 4 and every
    line on stderr and in the log shows them escaped."""
    rig.nic()
    chain = rig.chain("shared-multi", binary=client, residentSocket=str(rig.tmp / "no.sock"))
    netns = "/var/run/netns/rdma-cni-none\r\x1b[2K\x1b]0;forged\x07" + FORGED
    add = chain.add("c1", netns, rdma_blocks(1))
    assert add.code == 4, add.out
    assert "\\x0d\\x1b[2K" in add.err, add.err
    assert not RAW_CONTROLS.search(add.err), add.err
    assert forged_lines(add.err, STDERR_LINE) == [], add.err
    log = rig.log_file.read_text()
    assert "\\x0d" in log and forged_lines(log) == [], log
    assert chain.delete("c1", netns).rc == 0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_log_files_are_private_whatever_the_umask(rig: Rig, tmp_path: Path) -> None:
    """Under umask 000 the plugin's and `serve`'s new log files are 0600; an existing
    world-readable one (an older release made it 0644) loses the others' bits."""
    rig.nic()
    old = rig.tmp / "old.log"
    old.write_text("")
    old.chmod(0o644)
    saved = os.umask(0)
    try:
        serve = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log")
        try:
            chain = rig.chain("shared-multi", residentSocket="")
            assert chain.add("c1", rig.pod().path, rdma_blocks(1)).rc == 0
            assert chain.delete("c1").rc == 0
            # an ADD without its container ID: refused (code 4) and logged
            bad = run_plugin("ADD", {"cniVersion": "1.0.0", "name": "n", "logFile": str(old),
                                     "metricsFile": str(tmp_path / "metrics")},
                             node_ns=rig.node.ns)
            assert bad.code == 4, bad
        finally:
            serve.stop()
    finally:
        os.umask(saved)
    assert rig.log_file.read_text() and serve.log.read_text()
    assert (_mode(rig.log_file), _mode(serve.log)) == (0o600, 0o600)
    assert old.read_text() and _mode(old) == 0o640
