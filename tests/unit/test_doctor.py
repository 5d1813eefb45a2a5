"""doctor: every check against fake trees and temp files."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import replace
from ipaddress import IPv4Interface
from pathlib import Path

import pytest

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import NicUnavailable
from rdma_cni.node.rdma_mode import check_mode, read_netns_mode
from rdma_cni.tools.doctor import Facts, load_config, main, run_checks
from rdma_cni.tools.doctor_integrity import Mount, data_dirs, mount_of, parse_mountinfo

sys.path.insert(0, str(Path(__file__).parent))
from support.fakes.sysfs import FakeSys

PRIMARY = {"type": "vpc-cni"}
OURS = {"type": "rdma-cni", "mode": "shared"}


def kubelet_at(root: Path) -> dict[str, str]:
    """The config's kubelet paths, as ``install --kubelet-dir ROOT`` writes them."""
    return {"podResourcesSocket": f"{root}/pod-resources/kubelet.sock",
            "checkpointFile": f"{root}/device-plugins/kubelet_internal_checkpoint",
            "devicePluginDir": f"{root}/device-plugins"}


@pytest.fixture
def facts(tmp_path: Path) -> Facts:
    fs = FakeSys(tmp_path / "root")
    fs.netdev("eth1", pci="0000:3b:00.0")
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", uverbs="uverbs0")
    kubelet = tmp_path / "config.yaml"
    kubelet.write_text("kind: KubeletConfiguration\ntopologyManagerPolicy: best-effort\n")
    (tmp_path / "kubelet" / "device-plugins").mkdir(parents=True)
    (tmp_path / "kubelet" / "device-plugins" / "kubelet_internal_checkpoint").write_text("{}")
    (tmp_path / "dev-ib").mkdir()
    (tmp_path / "dev-ib" / "uverbs0").write_text("")
    binary = tmp_path / "rdma-cni"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "10-vpc.conflist").write_text(
        json.dumps({"cniVersion": "0.4.0", "name": "vpc-cni", "plugins": [PRIMARY, OURS]})
    )
    addrs = {"eth1": [IPv4Interface("192.0.2.1/24")]}
    (tmp_path / "netns").mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"21 1 0:20 / {tmp_path}/netns rw shared:5 - tmpfs tmpfs rw\n")
    return Facts(
        sysfs=Sysfs(str(fs.root)),
        addrs=lambda n: addrs.get(n, []),
        netns_mode=lambda: "shared",
        kubelet_config=str(kubelet),
        dev_infiniband=str(tmp_path / "dev-ib"),
        plugin_binary=str(binary),
        cni_conf_dir=str(conf),
        netns_dir=str(tmp_path / "netns"),
        mountinfo=str(mountinfo),
        kubelet_root=str(tmp_path / "kubelet"),
        config_record=str(tmp_path / "config-source.json"),
    )


def _status(checks: list, name: str) -> str:
    return next(c.status for c in checks if c.name == name)


def test_healthy_node(facts: Facts, tmp_path: Path) -> None:
    checks = run_checks({**OURS, "dataDir": str(tmp_path / "data"),
                         "kubelet": kubelet_at(tmp_path / "kubelet")}, facts=facts)
    assert [(c.name, c.status) for c in checks] == [
        ("nics", "ok"),
        ("netmask", "ok"),
        ("rdma-netns", "ok"),
        ("topology", "ok"),
        ("kubelet-sources", "ok"),
        ("dev-infiniband", "ok"),
        ("binary", "ok"),
        ("conflist", "ok"),
        ("data-dir", "ok"),
        ("netns-propagation", "ok"),
        ("data-dirs", "ok"),
        ("restart", "ok"),
    ]


def test_failures(facts: Facts, tmp_path: Path) -> None:
    Path(facts.kubelet_config).write_text('topologyManagerPolicy: "single-numa-node"\n')
    shutil.rmtree(facts.dev_infiniband)
    os.unlink(facts.plugin_binary)
    (Path(facts.cni_conf_dir) / "10-vpc.conflist").write_text(
        json.dumps({"plugins": [OURS, PRIMARY]})
    )
    bad = replace(
        facts, addrs=lambda n: [IPv4Interface("192.0.2.1/30")], netns_mode=lambda: "exclusive"
    )
    checks = run_checks({**OURS, "dataDir": str(tmp_path / "d")}, facts=bad)
    by = {c.name: c for c in checks}
    assert by["netmask"].status == "fail" and "eth1 192.0.2.1/30" in by["netmask"].detail
    assert by["rdma-netns"].status == "fail" and "exclusive" in by["rdma-netns"].detail
    assert by["topology"].status == "fail" and "single-numa-node" in by["topology"].detail
    assert {by[n].status for n in ("dev-infiniband", "binary", "conflist")} == {"fail"}
    assert all(c.fix for c in checks if c.status == "fail")


def test_nic_checks(facts: Facts, tmp_path: Path) -> None:
    assert _status(run_checks({**OURS, "devices": ["eth1", "gone"]}, facts=facts), "nics") == "fail"
    fs = FakeSys(tmp_path / "root")
    fs.write("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN")
    checks = run_checks(OURS, facts=facts)
    assert _status(checks, "nics") == "fail" and "DOWN" in checks[0].detail
    empty = Sysfs(str(tmp_path / "nothing"))
    assert _status(run_checks(OURS, empty, facts), "nics") == "fail"


def test_mode_dependent_checks(facts: Facts) -> None:
    Path(facts.kubelet_config).write_text("kind: KubeletConfiguration\n")  # policy none
    excl = replace(facts, addrs=lambda n: [], netns_mode=lambda: None)
    checks = run_checks({"mode": "exclusive"}, facts=excl)
    assert _status(checks, "netmask") == "ok"  # exclusive needs no /30 rule
    assert _status(checks, "rdma-netns") == "warn"
    assert _status(checks, "topology") == "fail"
    host = run_checks({"mode": "shared-host"}, facts=excl)
    assert _status(host, "topology") == "ok" and _status(host, "netmask") == "fail"
    assert _status(run_checks({}, facts=facts), "config") == "fail"


def test_main_json_and_exit(
    facts: Facts, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**OURS, "dataDir": str(tmp_path / "data"),
                               "kubelet": kubelet_at(tmp_path / "kubelet")}))
    assert main(["--json", "--config", str(cfg)], facts) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {c["status"] for c in doc} == {"ok"}
    os.unlink(facts.plugin_binary)
    assert main(["--config", str(cfg)], facts) == 1
    out = capsys.readouterr().out
    assert "[FAIL] binary:" in out and "fix: run `rdma-cni install`" in out
    # the entry as libcni runs it: the list's name and cniVersion copied in
    want = {**OURS, "name": "vpc-cni", "cniVersion": "0.4.0"}
    assert load_config(None, facts.cni_conf_dir) == want


def test_rdma_mode() -> None:
    class Fixed:  # stands in for adapters.rdmanl.RdmaNetlink, which ADD uses too
        def __init__(self, mode: str | None) -> None:
            self.mode = mode

        def netns_mode(self) -> str | None:
            return self.mode

    assert read_netns_mode(Fixed("exclusive")) == "exclusive"  # type: ignore[arg-type]
    assert read_netns_mode(Fixed(None)) is None  # type: ignore[arg-type]
    assert Facts().netns_mode is read_netns_mode
    check_mode("exclusive", "exclusive")
    check_mode("shared", "shared")
    check_mode("shared", None)
    with pytest.raises(NicUnavailable, match=r"shared-multi.*exclusive") as exc:
        check_mode("shared-multi", "exclusive")
    assert exc.value.code == 104


MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
25 22 0:23 / /run rw,nosuid shared:7 - tmpfs tmpfs rw
30 25 0:4 / /run/netns rw master:9 - tmpfs tmpfs rw
31 30 0:4 net:[4026532] /run/netns/pod\\040a rw shared:12 master:9 - nsfs nsfs rw
40 22 0:30 / /var/lib/kubelet rw - ext4 /dev/vdb rw
garbage line
"""


def test_parse_mountinfo() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert mounts == [Mount("/", "shared", "ext4"), Mount("/run", "shared", "tmpfs"),
                      Mount("/run/netns", "slave", "tmpfs"),
                      Mount("/run/netns/pod a", "shared+slave", "nsfs"),
                      Mount("/var/lib/kubelet", "private", "ext4")]
    assert mount_of("/run/netns", mounts) == Mount("/run/netns", "slave", "tmpfs")
    assert mount_of("/var/lib/kubelet/pods/x", mounts) == \
        Mount("/var/lib/kubelet", "private", "ext4")
    assert mount_of("/etc", mounts) == Mount("/", "shared", "ext4")


@pytest.mark.parametrize(("line", "status"), [
    ("shared:3", "ok"), ("master:3", "ok"), ("shared:3 master:1", "ok"), ("", "fail")])
def test_netns_propagation(facts: Facts, line: str, status: str) -> None:
    Path(facts.mountinfo).write_text(f"21 1 0:20 / {facts.netns_dir} rw {line} - tmpfs t rw\n")
    checks = {c.name: c for c in run_checks(OURS, facts=facts)}
    check = checks["netns-propagation"]
    assert check.status == status, check
    if status == "fail":
        assert "private" in check.detail and "mountPropagation: HostToContainer" in check.fix
    os.rmdir(facts.netns_dir)
    assert _status(run_checks(OURS, facts=facts), "netns-propagation") == "warn"


def test_one_data_dir_for_every_network(facts: Facts, tmp_path: Path) -> None:
    """A reservation is exclusive only within its data dir: networks with one each gave one
    address to two pods where their NICs share a subnet. The check said the opposite
    (sharing one "frees each other's addresses"; GC and the agent keep to their own
    network's records) and told operators to split them."""
    conf = Path(facts.cni_conf_dir)
    (conf / "20-second.conflist").write_text(json.dumps(
        {"name": "second", "plugins": [PRIMARY, {**OURS, "dataDir": "/var/lib/cni/rdma-cni"}]}))
    (conf / "10-vpc.conflist.rdma-cni.bak").write_text(json.dumps({"plugins": [OURS]}))
    checks = {c.name: c for c in run_checks(OURS, facts=facts)}
    assert checks["data-dirs"].status == "ok", checks["data-dirs"]
    (conf / "30-third.conflist").write_text(json.dumps(
        {"name": "third", "plugins": [PRIMARY, {**OURS, "dataDir": str(tmp_path / "own")}]}))
    bad = {c.name: c for c in run_checks(OURS, facts=facts)}["data-dirs"]
    assert bad.status == "fail", bad
    assert bad.detail == ("/var/lib/cni/rdma-cni is used by vpc-cni in 10-vpc.conflist, "
                          f"second in 20-second.conflist; {tmp_path / 'own'} is used by third "
                          "in 30-third.conflist")
    assert "one dataDir" in bad.fix
    (conf / "30-third.conflist").unlink()
    assert len(data_dirs(str(conf), "/var/lib/cni/rdma-cni")) == 1
    (conf / ".05-hidden.conflist").write_text(json.dumps(  # libcni lists it, runtimes too
        {"name": "hidden", "plugins": [PRIMARY, {**OURS, "dataDir": str(tmp_path / "h")}]}))
    assert f"{tmp_path / 'h'} is used by hidden in .05-hidden.conflist" in data_dirs(
        str(conf), "/var/lib/cni/rdma-cni")


def test_config_errors_are_one_line(facts: Facts, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nonexistent.json")
    assert main(["--config", missing], facts) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and missing in err and "Traceback" not in err
    assert main(["--json", "--config", missing], facts) == 1
    out, err = capsys.readouterr()
    assert missing in json.loads(out)["error"] and err.count("\n") == 1


def test_conflist_check_reads_the_file_the_runtime_uses(tmp_path: Path) -> None:
    """A directory sorts first but is not the runtime's config; a dotfile that sorts
    first is (libcni's ConfFiles lists it: the extension decides); a conflist whose
    plugins are not objects is named."""
    from rdma_cni.tools.doctor_files import check_conflist

    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "01-dir.conflist").mkdir()
    (conf / "10-vpc.conflist").write_text(json.dumps({"plugins": [PRIMARY, OURS]}))
    check = check_conflist(str(conf))
    assert (check.status, check.detail) == (
        "ok", f"rdma-cni chained after vpc-cni in {conf}/10-vpc.conflist")
    (conf / ".00-new.conflist").write_text(json.dumps({"plugins": [PRIMARY]}))
    check = check_conflist(str(conf))
    assert check.status == "fail" and ".00-new.conflist" in check.detail
    os.unlink(conf / ".00-new.conflist")
    (conf / "10-vpc.conflist").write_text(json.dumps({"plugins": ["vpc-cni", "rdma-cni"]}))
    check = check_conflist(str(conf))
    assert check.status == "fail" and "plugins are not a list of objects" in check.detail
    (conf / "10-vpc.conflist").write_text("[1]")
    check = check_conflist(str(conf))
    assert check.status == "fail" and "10-vpc.conflist: not a JSON object" in check.detail


def test_an_empty_dev_infiniband_and_an_unknown_mode_say_so(facts: Facts) -> None:
    """The DaemonSet's hostPath (DirectoryOrCreate) makes /dev/infiniband where ib_uverbs
    is not loaded: an empty directory is no pass. An unknown mode is quoted as input."""
    os.unlink(os.path.join(facts.dev_infiniband, "uverbs0"))
    by = {c.name: c for c in run_checks({**OURS, "mode": "x y"}, facts=facts)}
    assert by["dev-infiniband"].status == "fail" and "no uverbs" in by["dev-infiniband"].detail
    assert by["config"].detail == 'mode "x y" is not a known mode'


@pytest.mark.parametrize("stale", [5, True, "ConfigMap changed", {"a": 1}, [1, "x"]])
def test_a_record_whose_stale_is_no_list_of_strings_costs_only_the_restart_check(
        facts: Facts, tmp_path: Path, stale: object) -> None:
    """A config record with ``"stale": 5`` ended the whole report ("unexpected
    TypeError: 'int' object is not iterable"); the record is a file on the host."""
    from rdma_cni.store.run import configrecord

    Path(facts.config_record).write_text(json.dumps(
        {"schema": configrecord.SCHEMA, "stale": stale}))
    checks = run_checks({**OURS, "dataDir": str(tmp_path / "data"),
                         "kubelet": kubelet_at(tmp_path / "kubelet")}, facts=facts)
    assert [c.name for c in checks][-1] == "restart"
    by = {c.name: c for c in checks}
    assert by["restart"].status == "warn" and "not a list of strings" in by["restart"].detail


def test_what_the_record_calls_stale_reaches_the_terminal_escaped(
        facts: Facts, tmp_path: Path) -> None:
    """Strings of the record's ``stale`` were printed raw: an ESC sequence reached the
    terminal."""
    from rdma_cni.store.run import configrecord

    Path(facts.config_record).write_text(json.dumps(
        {"schema": configrecord.SCHEMA, "stale": ["mode label \x1b[2Jgone\nok"]}))
    checks = run_checks({**OURS, "dataDir": str(tmp_path / "data"),
                         "kubelet": kubelet_at(tmp_path / "kubelet")}, facts=facts)
    restart = next(c for c in checks if c.name == "restart")
    assert restart.status == "warn" and "mode label " in restart.detail
    assert "\x1b" not in restart.detail and "\n" not in restart.detail
