"""rdma-cni install/uninstall: the pure conflist edit, the files it writes, the
manifests and example configs under conf/."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from rdma_cni import __version__
from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import load_config
from rdma_cni.tools import bundle, conflist, install

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # k8srender
import k8srender  # noqa: E402

CAP = {"io.kubernetes.cri.pod-annotations": True}


def vpc_cni() -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0", "name": "vpc-cni", "disableCheck": True,
        "plugins": [
            {"type": "vpc-cni", "redirectToHostCIDRs": ["169.254.0.0/16"],
             "capabilities": {"bandwidth": True}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


ENTRY = install.make_entry({"dataDir": "/tmp/x"}, "shared")


def test_make_entry_sets_type_mode_capability_and_drops_list_keys() -> None:
    e = install.make_entry({"name": "n", "cniVersion": "1.0.0", "mode": "exclusive",
                            "capabilities": {"other": True}, "devices": ["a"]}, "shared-multi")
    assert e == {"type": "rdma-cni", "mode": "shared-multi", "devices": ["a"],
                 "capabilities": {"other": True, **CAP}}
    with pytest.raises(ConfigError, match="invalid mode"):
        install.make_entry({}, "bogus")


def test_insert_after_primary_keeps_the_rest() -> None:
    doc = vpc_cni()
    before = copy.deepcopy(doc)
    out = conflist.insert_entry(doc, ENTRY)
    assert doc == before  # pure
    assert [p["type"] for p in out["plugins"]] == ["vpc-cni", "rdma-cni", "portmap"]
    assert out["plugins"][1] == ENTRY
    assert {k: v for k, v in out.items() if k != "plugins"} == \
        {k: v for k, v in doc.items() if k != "plugins"}


def test_insert_updates_existing_entry_without_duplicating() -> None:
    doc = vpc_cni()
    doc["plugins"].append({"type": "rdma-cni", "mode": "exclusive"})
    doc["plugins"].append({"type": "rdma-cni", "mode": "shared"})
    out = conflist.insert_entry(doc, ENTRY)
    assert [p["type"] for p in out["plugins"]] == ["vpc-cni", "portmap", "rdma-cni"]
    assert out["plugins"][2]["mode"] == "shared"
    assert conflist.insert_entry(out, ENTRY) == out  # idempotent


def test_insert_moves_an_entry_that_sits_before_the_primary() -> None:
    doc = vpc_cni()
    doc["plugins"].insert(0, {"type": "rdma-cni"})
    out = conflist.insert_entry(doc, ENTRY)
    assert [p["type"] for p in out["plugins"]] == ["vpc-cni", "rdma-cni", "portmap"]


def test_refuses_single_plugin_conf_and_empty_lists() -> None:
    with pytest.raises(ConfigError, match="not a conflist"):
        conflist.insert_entry({"cniVersion": "0.4.0", "name": "x", "type": "vpc-cni"}, ENTRY)
    with pytest.raises(ConfigError, match="no primary"):
        conflist.insert_entry({"plugins": [{"type": "rdma-cni"}]}, ENTRY)


def test_remove_entry() -> None:
    out = conflist.remove_entry(conflist.insert_entry(vpc_cni(), ENTRY))
    assert out == vpc_cni()


def test_resolve_mode_order() -> None:
    def label() -> str | None:
        return "exclusive"

    assert install.resolve_mode("shared", {"mode": "shared-host"}, label) == "shared"
    assert install.resolve_mode(None, {"mode": "shared-host"}, label) == "exclusive"
    assert install.resolve_mode(None, {"mode": "shared-host"}, lambda: None) == "shared-host"
    with pytest.raises(ConfigError, match="no --mode"):
        install.resolve_mode(None, {}, lambda: None)
    with pytest.raises(ConfigError, match=r"from vke\.node\.rdma\.mode"):
        install.resolve_mode(None, {}, lambda: "weird")


# -- files ------------------------------------------------------------------------
def test_source_checkout_defaults_point_at_the_checkout(tmp_path: Path) -> None:
    """Run from a source checkout, install takes ./dist/rdma-cni and scripts/nccl_env.sh."""
    repo = Path(__file__).resolve().parents[2]
    assert bundle.default_bundle() == str(repo / "dist" / "rdma-cni")
    assert bundle.nccl_env_source(str(tmp_path)) == str(repo / "scripts" / "nccl_env.sh")


def make_tree(root: Path, version: str = "v1") -> Path:
    """A stand-in host tree: front, plugin, _internal/ with a library and nccl_env.sh."""
    (root / "_internal" / "rdma_cni" / "data").mkdir(parents=True)
    for name in ("rdma-cni", "rdma-cni-front"):
        exe = root / name
        exe.write_text(f"#!/bin/sh\necho {name} {version}\n")
        exe.chmod(0o755)
    (root / "_internal" / "lib.so").write_bytes(b"\0lib")
    (root / "_internal" / "rdma_cni" / "data" / "nccl_env.sh").write_text(f"# nccl {version}\n")
    return root


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    bundle = tmp_path / "bundle"  # the image's bundle; the host tree is bundle-host beside it
    bundle.mkdir()
    tree = make_tree(tmp_path / "bundle-host")
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    (conf_dir / "10-vpc-cni.conflist").write_text(json.dumps(vpc_cni()))
    (conf_dir / "99-loopback.conf").write_text('{"type": "loopback"}')
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"type": "rdma-cni", "dataDir": "/tmp/d"}))
    return {"bundle": bundle, "tree": tree, "bin": tmp_path / "bin", "conf": conf_dir,
            "cfg": cfg, "out": tmp_path / "run" / "config.json"}


def _args(n: dict[str, Path], *extra: str) -> list[str]:
    return ["--bundle", str(n["bundle"]), "--cni-bin-dir", str(n["bin"]),
            "--cni-conf-dir", str(n["conf"]), "--config", str(n["cfg"]), *extra]


def _label() -> str | None:
    return "shared-multi"


def _tree_dir(n: dict[str, Path]) -> Path:
    name = bundle.current_tree(str(n["bin"]))
    assert name is not None
    return n["bin"] / "rdma-cni.versions" / name


def test_install_then_uninstall(node: dict[str, Path]) -> None:
    conflist = node["conf"] / "10-vpc-cni.conflist"
    original = conflist.read_bytes()
    assert install.main(_args(node, "--write-config", str(node["out"])), _label) == 0
    link = node["bin"] / "rdma-cni"
    tree = _tree_dir(node)
    assert tree.name.startswith(f"{__version__}-") and len(tree.name) == len(__version__) + 13
    assert os.readlink(link) == f"rdma-cni.versions/{tree.name}/rdma-cni-front"
    assert os.access(link, os.X_OK)
    assert (tree / "_internal" / "lib.so").read_bytes() == b"\0lib"
    assert (tree / ".in-use").is_file()  # the lock the front holds while the plugin runs
    nccl = node["bin"] / "nccl_env.sh"
    assert nccl.read_text() == "# nccl v1\n"
    assert stat.S_IMODE(nccl.stat().st_mode) == 0o755
    doc = json.loads(conflist.read_text())
    assert [p["type"] for p in doc["plugins"]] == ["vpc-cni", "rdma-cni", "portmap"]
    assert doc["plugins"][1]["mode"] == "shared-multi"
    assert doc["plugins"][1]["capabilities"] == CAP
    assert (node["conf"] / "10-vpc-cni.conflist.rdma-cni.bak").read_bytes() == original
    assert json.loads(node["out"].read_text()) == doc["plugins"][1]
    # what the subcommands load from the conf dir
    assert load_config(None, str(node["conf"]))["name"] == "vpc-cni"
    assert sorted(os.listdir(node["conf"])) == [
        "10-vpc-cni.conflist", "10-vpc-cni.conflist.rdma-cni.bak", "99-loopback.conf"]

    assert install.main(["uninstall", "--cni-bin-dir", str(node["bin"]),
                         "--cni-conf-dir", str(node["conf"])]) == 0
    assert json.loads(conflist.read_text()) == vpc_cni()
    assert sorted(os.listdir(node["conf"])) == ["10-vpc-cni.conflist", "99-loopback.conf"]
    assert os.listdir(node["bin"]) == []


def test_install_is_idempotent_and_updates_the_tree(node: dict[str, Path]) -> None:
    assert install.main(_args(node), _label) == 0
    conflist = node["conf"] / "10-vpc-cni.conflist"
    mtime = conflist.stat().st_mtime_ns
    first = _tree_dir(node)
    inode = first.stat().st_ino
    assert install.main(_args(node), _label) == 0
    assert conflist.stat().st_mtime_ns == mtime  # unchanged: not rewritten
    assert _tree_dir(node).stat().st_ino == inode  # identical: not copied
    (node["tree"] / "rdma-cni-front").write_text("#!/bin/sh\necho v2\n")
    assert install.main(_args(node, "--mode", "exclusive"), _label) == 0
    assert _tree_dir(node) != first  # a new tree beside the old one, then the link switched
    assert (node["bin"] / "rdma-cni").read_text().endswith("v2\n")
    assert not first.exists()  # nothing ran from the old tree: pruned
    assert json.loads(conflist.read_text())["plugins"][1]["mode"] == "exclusive"
    leftovers = [n for n in os.listdir(node["bin"]) if n.startswith(".")]
    assert leftovers == []
    assert sorted(os.listdir(node["bin"] / "rdma-cni.versions")) == [".install.lock",
                                                              _tree_dir(node).name]
    assert len(json.loads(conflist.read_text())["plugins"]) == 3


def test_watch_re_adds_the_entry_after_the_primary_rewrites(node: dict[str, Path]) -> None:
    assert install.main(_args(node), _label) == 0
    conflist = node["conf"] / "10-vpc-cni.conflist"
    conflist.write_text(json.dumps(vpc_cni()))  # the primary's agent restarts
    entry = install.make_entry({"type": "rdma-cni", "dataDir": "/tmp/d"}, "shared-multi")
    install.watch(str(node["conf"]), entry, 0.0, rounds=1)
    doc = json.loads(conflist.read_text())
    assert [p["type"] for p in doc["plugins"]] == ["vpc-cni", "rdma-cni", "portmap"]
    # a new file sorting first takes over: the watch follows it
    (node["conf"] / "05-new.conflist").write_text(json.dumps(vpc_cni()))
    install.watch(str(node["conf"]), entry, 0.0, rounds=1)
    doc = json.loads((node["conf"] / "05-new.conflist").read_text())
    assert doc["plugins"][1] == entry


def test_install_errors_are_reported(node: dict[str, Path], capsys: Any) -> None:
    for f in node["conf"].iterdir():
        f.unlink()
    (node["conf"] / "10-vpc.conf").write_text('{"cniVersion":"0.4.0","type":"vpc-cni"}')
    assert install.main(_args(node), _label) == 1
    assert "not a conflist" in capsys.readouterr().err
    (node["tree"] / "rdma-cni").unlink()
    assert install.main(_args(node), _label) == 1
    assert "no executable rdma-cni-front and rdma-cni" in capsys.readouterr().err


def test_a_config_naming_another_type_still_makes_our_one_entry(node: dict[str, Path]) -> None:
    """The config's own "type" won: each install added one more entry of that type (not
    ours to replace), and uninstall left them all, each failing every pod's ADD."""
    node["cfg"].write_text(json.dumps({"type": "rdma", "dataDir": "/tmp/d"}))
    conflist = node["conf"] / "10-vpc-cni.conflist"
    for _ in range(3):
        assert install.main(_args(node), _label) == 0
    assert [p["type"] for p in json.loads(conflist.read_text())["plugins"]] == \
        ["vpc-cni", "rdma-cni", "portmap"]
    assert install.main(["uninstall", "--cni-bin-dir", str(node["bin"]),
                         "--cni-conf-dir", str(node["conf"])]) == 0
    assert json.loads(conflist.read_text()) == vpc_cni()


@pytest.mark.parametrize("bad", [{"maxInterfaces": "lots"}, {"cniConfName": {"a": 1}},
                                 {"dataDir": "relative/dir"}])
def test_an_entry_add_would_refuse_is_never_written(node: dict[str, Path], capsys: Any,
                                                    bad: dict[str, Any]) -> None:
    """It was written: every pod's ADD on the node then failed with code 7, those without
    RDMA interfaces included."""
    node["cfg"].write_text(json.dumps({"type": "rdma-cni", **bad}))
    before = {f.name: f.read_bytes() for f in node["conf"].iterdir()}
    assert install.main(_args(node), _label) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid network configuration" in err
    assert {f.name: f.read_bytes() for f in node["conf"].iterdir()} == before
    assert not node["bin"].exists() or os.listdir(node["bin"]) == []


def test_uninstall_leaves_files_no_runtime_reads_and_does_the_rest(node: dict[str, Path],
                                                                    capsys: Any) -> None:
    """A dangling symlink or a config with comments (neither of which libcni can load)
    ended the uninstall there: every later file kept our entry, the plugin stayed."""
    assert install.main(_args(node), _label) == 0
    later = node["conf"] / "20-second.conflist"
    later.write_text(json.dumps({"name": "second", "plugins": [{"type": "vpc-cni"},
                                                               {"type": "rdma-cni"}]}))
    (node["conf"] / "11-gone.conflist").symlink_to(node["conf"] / "nowhere.conflist")
    (node["conf"] / "12-legacy.conf").write_text('// a comment\n{"type": "x"}')
    capsys.readouterr()
    assert install.main(["uninstall", "--cni-bin-dir", str(node["bin"]),
                         "--cni-conf-dir", str(node["conf"])]) == 0
    err = capsys.readouterr().err
    assert err.count("left alone") == 2 and "Traceback" not in err
    assert json.loads((node["conf"] / "10-vpc-cni.conflist").read_text()) == vpc_cni()
    assert [p["type"] for p in json.loads(later.read_text())["plugins"]] == ["vpc-cni"]
    assert os.listdir(node["bin"]) == []


def test_a_watch_still_running_does_not_put_the_entry_back_after_uninstall(
        node: dict[str, Path]) -> None:
    """The watch re-added the entry a second after uninstall removed it and the plugin:
    every pod's ADD then failed (no such plugin)."""
    assert install.main(_args(node), _label) == 0
    conflist = node["conf"] / "10-vpc-cni.conflist"
    entry = json.loads(conflist.read_text())["plugins"][1]
    assert install.main(["uninstall", "--cni-bin-dir", str(node["bin"]),
                         "--cni-conf-dir", str(node["conf"])]) == 0
    install.watch(str(node["conf"]), entry, 0.0, rounds=1, bin_dir=str(node["bin"]))
    assert json.loads(conflist.read_text()) == vpc_cni()


# -- conf/ -----------------------------------------------------------------------------
@pytest.mark.parametrize("path", sorted((REPO / "conf").glob("*.conflist")),
                         ids=lambda p: p.name)
def test_example_conflists_validate(path: Path) -> None:
    from rdma_cni.models.netconf import load_netconf

    doc = json.loads(path.read_text())
    assert doc["cniVersion"] == "0.4.0"
    types = [p["type"] for p in doc["plugins"]]
    assert types[0] != "rdma-cni" and types.count("rdma-cni") == 1
    entry = load_config(None, str(path.parent)) if path.name.startswith("10-") else None
    raw = {**doc["plugins"][types.index("rdma-cni")], "name": doc["name"],
           "cniVersion": doc["cniVersion"]}
    assert entry is None or entry == raw
    assert raw["capabilities"] == CAP
    conf = load_netconf(raw)
    assert conf.mode in install.MODES
    if path.name != "10-vpc-cni-rdma.conflist":
        assert path.stem == f"rdma-{conf.mode}"


def test_k8s_manifests_parse_and_are_consistent() -> None:
    docs = k8srender.render(k8srender.BASE)
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"DaemonSet", "ServiceAccount", "ClusterRole",
                          "ClusterRoleBinding", "ConfigMap"}
    entry = json.loads(kinds["ConfigMap"]["data"]["config.json"])
    assert "mode" not in entry and "kubelet" not in entry  # the node label; --kubelet-dir
    spec = kinds["DaemonSet"]["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert spec["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]
    init = spec["initContainers"][0]
    assert init["command"][:2] == ["rdma-cni", "install"]
    # the options install takes are the ones the DaemonSet passes
    args = install._parser("rdma-cni install").parse_args(init["command"][2:])
    assert args.kubelet_dir == "/var/lib/kubelet" and args.node_ip == ["$(HOST_IP)"]
    names = {c["name"]: c for c in spec["containers"]}
    for sub in ("agent", "device-plugin", "exporter"):
        assert names[sub]["command"][:2] == ["rdma-cni", sub]
    vols = {v["name"] for v in spec["volumes"]}
    for c in [*spec["containers"], *spec["initContainers"]]:
        assert {m["name"] for m in c.get("volumeMounts", [])} <= vols
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError", c["name"]


def test_the_kubelet_dir_and_node_address_reach_the_entry(node: dict[str, Path]) -> None:
    """The DaemonSet's --kubelet-dir (the kubelet root setting) and --node-ip
    (status.hostIP): every kubelet path under that root, the address in nodeIPs, and what
    the config names itself kept."""
    args = _args(node, "--kubelet-dir", "/var/lib/k0s/kubelet", "--node-ip", "192.0.2.10",
                 "--node-ip", "", "--write-config", str(node["out"]))
    assert install.main(args, _label) == 0
    entry = json.loads(node["out"].read_text())
    assert entry["kubelet"] == {
        "podResourcesSocket": "/var/lib/k0s/kubelet/pod-resources/kubelet.sock",
        "checkpointFile": "/var/lib/k0s/kubelet/device-plugins/kubelet_internal_checkpoint",
        "devicePluginDir": "/var/lib/k0s/kubelet/device-plugins"}
    assert entry["nodeIPs"] == ["192.0.2.10"]
    node["cfg"].write_text(json.dumps({"type": "rdma-cni", "kubelet": {
        "checkpointFile": "/elsewhere/ckpt"}}))
    assert install.main(_args(node, "--kubelet-dir", "/data/kubelet/", "--write-config",
                              str(node["out"])), _label) == 0
    entry = json.loads(node["out"].read_text())
    assert entry["kubelet"]["checkpointFile"] == "/elsewhere/ckpt"
    assert entry["kubelet"]["devicePluginDir"] == "/data/kubelet/device-plugins"
    assert "nodeIPs" not in entry
    doc = json.loads((node["conf"] / "10-vpc-cni.conflist").read_text())
    assert doc["plugins"][1] == entry  # the conflist's entry is the same


def test_write_config_records_what_the_entry_was_rendered_from(node: dict[str, Path]) -> None:
    """Issue 32 item 2: the ConfigMap file's digest and the node label, beside the entry,
    for cni-watch to compare with later (``rdma_cni.store.run.configrecord``)."""
    assert install.main(_args(node, "--write-config", str(node["out"])), _label) == 0
    record = json.loads((node["out"].parent / "config-source.json").read_text())
    assert record["configFile"] == str(node["cfg"])
    assert record["configSha256"] == hashlib.sha256(node["cfg"].read_bytes()).hexdigest()
    assert (record["labelUsed"], record["label"], record["mode"]) == (
        True, "shared-multi", "shared-multi")
    assert record["stale"] == [] and record["interval"] is None  # no watch compares
    assert install.main(_args(node, "--mode", "exclusive", "--write-config",
                              str(node["out"])), _label) == 0
    record = json.loads((node["out"].parent / "config-source.json").read_text())
    assert (record["labelUsed"], record["label"], record["mode"]) == (False, None, "exclusive")


def test_an_uninstall_during_a_watchs_reapply_leaves_no_entry(
        node: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch checked that the plugin was installed, then merged the entry back into
    the primary's rewritten file; an uninstall between the two took the plugin out and
    found no entry to remove: the entry came back without its plugin (every pod's ADD
    failed). The bin dir's lock orders them."""
    import threading
    import time

    from rdma_cni.tools import confwatch

    assert install.main(_args(node), _label) == 0
    conflist_path = node["conf"] / "10-vpc-cni.conflist"
    entry = json.loads(conflist_path.read_text())["plugins"][1]
    conflist_path.write_text(json.dumps(vpc_cni()))  # the primary rewrote its file
    real = confwatch.ensure_entry
    done: list[int] = []

    def slow_merge(*a: Any, **kw: Any) -> str:
        uninstaller = threading.Thread(target=lambda: done.append(install.main(
            ["uninstall", "--cni-bin-dir", str(node["bin"]),
             "--cni-conf-dir", str(node["conf"])])))
        uninstaller.start()
        time.sleep(0.5)  # the uninstall runs now, unless it waits for this re-apply
        try:
            return str(real(*a, **kw))
        finally:
            slow_merge.uninstaller = uninstaller  # type: ignore[attr-defined]

    monkeypatch.setattr(confwatch, "ensure_entry", slow_merge)
    install.watch(str(node["conf"]), entry, 0.0, rounds=0, bin_dir=str(node["bin"]))
    slow_merge.uninstaller.join(10)  # type: ignore[attr-defined]
    assert done == [0]
    assert json.loads(conflist_path.read_text()) == vpc_cni()
    assert not (node["bin"] / "rdma-cni").exists()


def test_a_watch_whose_install_was_replaced_re_applies_nothing(
        node: dict[str, Path], tmp_path: Path) -> None:
    """Two versions' watches overlap in a rollout: the older one kept writing its entry
    over the newer one's, the newer version's plugin running it. The newest install wins."""
    assert install.main(_args(node), _label) == 0
    mine = bundle.current_tree(str(node["bin"]))
    conflist_path = node["conf"] / "10-vpc-cni.conflist"
    entry = json.loads(conflist_path.read_text())["plugins"][1]
    newer = tmp_path / "newer-tree"
    shutil.copytree(_tree_dir(node), newer, symlinks=True)
    (newer / "_internal" / "newer").write_text("v2")
    with bundle.install_lock(str(node["bin"])):
        name, _ = bundle.install_tree(str(newer), str(node["bin"]))
        bundle.switch_link(str(node["bin"]), name)
    assert name != mine
    conflist_path.write_text(json.dumps(vpc_cni()))  # the primary rewrote its file
    install.watch(str(node["conf"]), {**entry, "mode": "exclusive"}, 0.0, rounds=0,
                  bin_dir=str(node["bin"]), tree=mine)
    assert json.loads(conflist_path.read_text()) == vpc_cni()
    install.watch(str(node["conf"]), entry, 0.0, rounds=0, bin_dir=str(node["bin"]),
                  tree=name)
    assert json.loads(conflist_path.read_text())["plugins"][1] == entry
