"""``Allocate``'s check that the node's first CNI config chains rdma-cni, when that file
is a symlink (a primary that keeps its conflist elsewhere, docs/packaging.md): libcni
counts the link, so the check follows it as ``install`` does, an absolute target under
the host root. A target this container cannot see leaves the allocation allowed, with a
warning: before, the link read as no file, and every RDMA pod of the node was refused
("no CNI config", or a leftover file further down named as the node's config)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from rdma_cni.tools.chaincheck import chain_problem


def _list(path: Path, *types: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cniVersion": "1.0.0", "name": "net",
                                "plugins": [{"type": t} for t in types]}))


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path]:
    """(the host root as this container sees it, the conf dir under it)."""
    host = tmp_path / "host"
    net_d = host / "etc/cni/net.d"
    net_d.mkdir(parents=True)
    _list(net_d / "99-leftover.conflist", "bridge")  # sorts after the primary's link
    os.symlink("/var/run/vpc-cni/10-vpc-cni.conflist", net_d / "10-vpc-cni.conflist")
    return host, net_d


def test_an_absolute_link_is_read_under_the_host_root(node: tuple[Path, Path]) -> None:
    host, net_d = node
    target = host / "var/run/vpc-cni/10-vpc-cni.conflist"
    _list(target, "vpc-cni", "rdma-cni")
    assert chain_problem(str(net_d), str(host)) is None
    _list(target, "vpc-cni")  # the primary rewrote its own file
    assert chain_problem(str(net_d), str(host)) == (
        f"the node's first CNI config {net_d}/10-vpc-cni.conflist does not chain rdma-cni")


def test_a_relative_link_is_followed(node: tuple[Path, Path]) -> None:
    host, net_d = node
    (net_d / "10-vpc-cni.conflist").unlink()
    _list(net_d / "primary/vpc.conflist", "vpc-cni")
    os.symlink("primary/vpc.conflist", net_d / "10-vpc-cni.conflist")
    assert "does not chain rdma-cni" in str(chain_problem(str(net_d), str(host)))


def test_a_target_not_mounted_here_allows_the_allocation(
        node: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    host, net_d = node
    with caplog.at_level(logging.WARNING, logger="rdma_cni.kube.deviceplugin"):
        assert chain_problem(str(net_d), str(host)) is None
    assert "cannot read" in caplog.text and "10-vpc-cni.conflist" in caplog.text


def test_a_plain_first_file_is_read_as_before(tmp_path: Path) -> None:
    _list(tmp_path / "10-vpc-cni.conflist", "vpc-cni", "rdma-cni")
    assert chain_problem(str(tmp_path)) is None
    assert chain_problem(str(tmp_path / "none")) == f"no CNI config in {tmp_path}/none"
