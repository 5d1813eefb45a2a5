"""Rewriting the primary's conflist: through symlinks (the target edited in place, the link
kept), and only if nobody wrote it since it was read (conffile's compare and swap)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from primary_rig import generation, primary, write

from rdma_cni.adapters import fsops
from rdma_cni.errors import ConfigError, TryAgain
from rdma_cni.tools import conffile, conflist, install

ENTRY = install.make_entry({"dataDir": "/tmp/x"}, "shared-multi")
NAME = "10-vpc-cni.conflist"


def types(path: Path) -> list[str]:
    return [p["type"] for p in json.loads(path.read_text())["plugins"]]


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    """The primary's own file outside the conf dir, and the conf dir's link to it."""
    own = tmp_path / "vpc" / NAME
    own.parent.mkdir()
    write(str(own), primary(1), "rename")
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / NAME).symlink_to(f"../vpc/{NAME}")
    return own, conf


def test_a_linked_conflist_is_edited_at_its_target_and_stays_a_link(
        linked: tuple[Path, Path]) -> None:
    own, conf = linked
    before = own.read_bytes()
    assert conflist.ensure_entry(str(conf), ENTRY).startswith("added to")
    assert os.readlink(conf / NAME) == f"../vpc/{NAME}"
    assert types(own) == ["vpc-cni", "rdma-cni", "portmap"]
    assert (conf / (NAME + ".rdma-cni.bak")).read_bytes() == before
    assert sorted(os.listdir(own.parent)) == [NAME]  # no temp file left by the target
    write(str(own), primary(2), "rename")  # the primary's next write reaches the runtime
    assert generation(str(conf / NAME)) == (2, False)
    assert conflist.ensure_entry(str(conf), ENTRY).startswith("added to")
    assert generation(str(conf / NAME)) == (2, True)
    assert conflist.remove_entries(str(conf)) == [str(conf / NAME)]
    assert os.path.islink(conf / NAME) and generation(str(own)) == (2, False)


def test_a_chain_and_an_absolute_link_under_the_host_root(tmp_path: Path) -> None:
    host = tmp_path / "host"
    own = host / "var" / "lib" / "vpc" / NAME
    own.parent.mkdir(parents=True)
    write(str(own), primary(1), "rename")
    conf = host / "etc" / "cni" / "net.d"
    conf.mkdir(parents=True)
    (host / "etc" / "cni" / "current").symlink_to(f"/var/lib/vpc/{NAME}")  # as the host sees it
    (conf / NAME).symlink_to("../current")
    chain = conffile.link_chain(str(conf / NAME), str(host))
    assert chain[-1] == f"{host}/var/lib/vpc/{NAME}"
    conflist.ensure_entry(str(conf), ENTRY, str(host))
    assert types(own) == ["vpc-cni", "rdma-cni", "portmap"]
    assert os.readlink(conf / NAME) == "../current"
    assert os.readlink(host / "etc" / "cni" / "current") == f"/var/lib/vpc/{NAME}"


def test_a_directory_link_on_the_way_is_the_hosts(tmp_path: Path) -> None:
    """The primary's file is reached through a directory that is an absolute symlink on
    the host (/etc/vpc -> /opt/vpc): it is the host's /opt/vpc, under the host root,
    not this machine's (where the edit failed as a dangling link, or went elsewhere)."""
    host = tmp_path / "host"
    own = host / "opt" / "vpc" / NAME
    own.parent.mkdir(parents=True)
    write(str(own), primary(1), "rename")
    (host / "etc").mkdir()
    (host / "etc" / "vpc").symlink_to("/opt/vpc")
    conf = host / "etc" / "cni" / "net.d"
    conf.mkdir(parents=True)
    (conf / NAME).symlink_to(f"/etc/vpc/{NAME}")
    assert conffile.link_chain(str(conf / NAME), str(host))[-1] == str(own)
    conflist.ensure_entry(str(conf), ENTRY, str(host))
    assert types(own) == ["vpc-cni", "rdma-cni", "portmap"]
    assert os.readlink(conf / NAME) == f"/etc/vpc/{NAME}"
    assert os.readlink(host / "etc" / "vpc") == "/opt/vpc"


def test_dot_dot_in_a_link_target_is_the_hosts_and_never_leaves_the_root(
        tmp_path: Path) -> None:
    """".." after a directory link is the parent of where the link leads (the host's
    kernel resolves it so), and no number of ".." climbs out of the host root: a file
    outside it (this machine's) is never read or edited."""
    host = tmp_path / "host"
    (host / "opt" / "vpc").mkdir(parents=True)
    write(str(host / "opt" / NAME), primary(1), "rename")  # /opt/<name>: the host's
    (host / "etc").mkdir()
    write(str(host / "etc" / NAME), primary(2), "rename")  # a decoy at /etc/<name>
    (host / "etc" / "vpc").symlink_to("/opt/vpc")
    conf = host / "etc" / "cni" / "net.d"
    conf.mkdir(parents=True)
    (conf / NAME).symlink_to(f"/etc/vpc/../{NAME}")
    assert conffile.link_chain(str(conf / NAME), str(host))[-1] == str(host / "opt" / NAME)
    outside = tmp_path / "outside.conflist"
    write(str(outside), primary(3), "rename")
    (conf / "05-up.conflist").symlink_to("../" * 12 + str(outside).lstrip("/"))
    chain = conffile.link_chain(str(conf / "05-up.conflist"), str(host))
    assert chain[-1] == str(host / str(outside).lstrip("/")), chain
    with pytest.raises(ConfigError, match="does not exist"):
        conflist.ensure_entry(str(conf), ENTRY, str(host))
    assert generation(str(outside)) == (3, False)


@pytest.mark.parametrize("target", ["missing.conflist", "loop.conflist", "dir.conflist"])
def test_a_link_that_leads_to_no_file_is_refused_naming_the_link(
        tmp_path: Path, target: str) -> None:
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "loop.conflist").symlink_to("loop.conflist")
    (tmp_path / "dir.conflist").mkdir()
    (conf / "05-x.conflist").symlink_to(f"../{target}" if target == "dir.conflist" else target)
    listing = sorted(os.listdir(conf))
    with pytest.raises(ConfigError) as e:
        conflist.ensure_entry(str(conf), ENTRY)
    assert str(conf / "05-x.conflist") in e.value.msg and "\n" not in e.value.msg
    assert sorted(os.listdir(conf)) == listing  # nothing written, the link untouched


def test_a_write_since_the_read_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / NAME
    write(str(path), primary(1), "rename")
    for change in ("rename", "in-place"):  # same size, same second: content decides
        snap = conffile.read(str(path))
        write(str(path), primary(2 if change == "rename" else 3), change)
        assert conffile.replace(snap, b"{}") is conffile.Outcome.CHANGED
        snap.close()
    assert generation(str(path)) == (3, False)
    assert os.listdir(tmp_path) == [NAME]


def test_a_file_a_writer_holds_open_is_busy_a_reader_does_not_matter(tmp_path: Path) -> None:
    path = tmp_path / NAME
    write(str(path), primary(1), "rename")
    snap = conffile.read(str(path))
    with open(path, "r+"):  # an in-place writer with the file open
        assert conffile.replace(snap, b"{}") is conffile.Outcome.BUSY
    with open(path):  # the runtime reading it
        assert conffile.replace(snap, b"{}\n") is conffile.Outcome.DONE
    snap.close()
    assert path.read_bytes() == b"{}\n"


def test_a_rename_that_lands_right_before_the_swap_is_put_back(
        tmp_path: Path, monkeypatch: Any) -> None:
    """The primary renames a newer file in between our last check and our swap, and
    again between each of the next two swaps: its newest file ends up at the path."""
    path = tmp_path / NAME
    write(str(path), primary(1), "rename")
    real, gens = fsops.exchange, iter([2, 3, 4])

    def racing(a: str, b: str) -> None:
        gen = next(gens, None)
        if gen is not None:
            write(str(path), primary(gen), "rename")
        real(a, b)

    monkeypatch.setattr(fsops, "exchange", racing)
    snap = conffile.read(str(path))
    assert conffile.replace(snap, json.dumps(primary(1)).encode()) is conffile.Outcome.CHANGED
    snap.close()
    assert generation(str(path)) == (4, False)
    assert sorted(os.listdir(tmp_path)) == [NAME]


def test_ensure_entry_merges_into_the_newest_file(tmp_path: Path, monkeypatch: Any) -> None:
    """A write between the read and the swap: the merge is redone on the new file."""
    conf = tmp_path / "net.d"
    conf.mkdir()
    path = conf / NAME
    write(str(path), primary(1), "rename")
    real, once = conffile.replace, threading.Event()

    def primary_first(snap: conffile.Snapshot, data: bytes) -> conffile.Outcome:
        if not once.is_set():
            once.set()
            write(str(path), primary(2), "in-place")
        return real(snap, data)

    monkeypatch.setattr(conffile, "replace", primary_first)
    conflist.ensure_entry(str(conf), ENTRY)
    assert generation(str(path)) == (2, True)
    assert generation(str(conf / (NAME + ".rdma-cni.bak"))) == (2, False)


def test_a_file_held_open_for_longer_than_the_budget_is_one_line(
        tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(conflist, "EDIT_BUDGET", 0.2, raising=False)
    conf = tmp_path / "net.d"
    conf.mkdir()
    write(str(conf / NAME), primary(1), "rename")
    with open(conf / NAME, "r+"), pytest.raises(TryAgain) as e:
        conflist.ensure_entry(str(conf), ENTRY)
    assert "another process kept it open for writing" in e.value.msg
    assert sorted(os.listdir(conf)) == [NAME]  # no backup of an edit that did not happen


def test_a_file_read_halfway_through_an_in_place_write_is_read_again(tmp_path: Path) -> None:
    """The primary truncates its file and writes it again in place: read in between, it
    does not parse. While the writer has it open that is a write in progress (install
    waits and merges into what it wrote); once nobody does, the file is broken."""
    conf = tmp_path / "net.d"
    conf.mkdir()
    path = conf / NAME
    with open(path, "w") as writer:  # truncated, not yet written
        done = threading.Timer(0.3, lambda: (writer.write(json.dumps(primary(2))),
                                             writer.close()))
        done.start()
        try:
            conflist.ensure_entry(str(conf), ENTRY)
        finally:
            done.join()
    assert generation(str(path)) == (2, True)
    path.write_text('{"plugins": [')
    with pytest.raises(ConfigError, match="not valid JSON"):
        conflist.ensure_entry(str(conf), ENTRY)
