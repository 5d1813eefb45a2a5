"""``install --watch`` in-process: inotify wake-ups, the primary's rewrites (atomic rename
and in-place truncate + write), the conf dir replaced, the poll backstop. No root."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.proc import wait_for

from rdma_cni.tools import install
from rdma_cni.tools.confwatch import DirWatch

ENTRY = install.make_entry({"dataDir": "/tmp/x"}, "shared-multi")

POLL = 0.005  # seconds between looks: the entry is back well within the second


def primary(gen: int) -> dict[str, Any]:
    """The stand-in primary's conflist; ``gen`` changes a field of its own each rewrite."""
    return {"cniVersion": "0.4.0", "name": "vpc-cni", "disableCheck": True,
            "plugins": [{"type": "vpc-cni", "generation": gen},
                        {"type": "portmap", "capabilities": {"portMappings": True}}]}


def rewrite_atomic(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")  # vpc-cni: temp file, then rename
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def rewrite_in_place(path: Path, doc: dict[str, Any]) -> None:
    with open(path, "r+") as f:  # O_TRUNC-less truncate, a pause, then the write
        f.truncate(0)
        f.flush()
        time.sleep(0.02)
        f.write(json.dumps(doc))


def chained(path: Path) -> list[str]:
    try:
        return [p["type"] for p in json.loads(path.read_text())["plugins"]]
    except (OSError, ValueError):
        return []


@pytest.fixture
def watching(tmp_path: Path) -> Iterator[tuple[Path, threading.Thread]]:
    conf = tmp_path / "net.d"
    conf.mkdir()
    rewrite_atomic(conf / "10-vpc-cni.conflist", primary(0))
    stop = threading.Event()
    # a 60 s backstop: everything below must come from inotify
    t = threading.Thread(target=install.watch, args=(str(conf), ENTRY, 60.0),
                         kwargs={"stop": stop}, daemon=True)
    t.start()
    yield conf, t
    stop.set()
    (conf.parent / "poke").mkdir(exist_ok=True)  # wake the watch so it sees stop
    if conf.is_dir():
        (conf / "poke").touch()
    t.join(5)
    assert not t.is_alive()


@pytest.mark.parametrize("rewrite", [rewrite_atomic, rewrite_in_place])
def test_entry_back_within_a_second_of_each_rewrite(
        watching: tuple[Path, threading.Thread], rewrite: Callable[[Path, Any], None]) -> None:
    conf, _ = watching
    path = conf / "10-vpc-cni.conflist"
    wait_for(lambda: chained(path) == ["vpc-cni", "rdma-cni", "portmap"], "the entry", 1.0, POLL)
    for gen in range(1, 6):
        rewrite(path, primary(gen))
        start = time.monotonic()
        wait_for(lambda: "rdma-cni" in chained(path), "the entry", 1.0, POLL)
        took = time.monotonic() - start
        assert took < 1.0
        doc = json.loads(path.read_text())
        assert doc["plugins"][0] == {"type": "vpc-cni", "generation": gen}  # primary's kept
        assert [p["type"] for p in doc["plugins"]] == ["vpc-cni", "rdma-cni", "portmap"]
        assert doc["plugins"][1] == ENTRY
    assert sorted(os.listdir(conf)) == ["10-vpc-cni.conflist",
                                        "10-vpc-cni.conflist.rdma-cni.bak"]


def test_follows_a_new_first_file_and_a_replaced_dir(
        watching: tuple[Path, threading.Thread]) -> None:
    conf, _ = watching
    wait_for(lambda: "rdma-cni" in chained(conf / "10-vpc-cni.conflist"), "the entry", 1.0, POLL)
    rewrite_atomic(conf / "05-other.conflist", primary(7))
    wait_for(lambda: "rdma-cni" in chained(conf / "05-other.conflist"), "the entry", 1.0, POLL)
    shutil.rmtree(conf)  # the dir replaced: removed, then made anew
    time.sleep(0.1)
    conf.mkdir()
    rewrite_atomic(conf / "10-vpc-cni.conflist", primary(8))
    wait_for(lambda: "rdma-cni" in chained(conf / "10-vpc-cni.conflist"), "the entry", 1.0, POLL)
    new = conf.parent / "net.d.new"  # and swapped in by rename
    new.mkdir()
    rewrite_atomic(new / "10-vpc-cni.conflist", primary(9))
    shutil.rmtree(conf)
    os.rename(new, conf)
    wait_for(lambda: "rdma-cni" in chained(conf / "10-vpc-cni.conflist"), "the entry", 1.0, POLL)
    assert json.loads((conf / "10-vpc-cni.conflist").read_text())["plugins"][0]["generation"] == 9


def test_a_broken_primary_file_is_reported_once_and_fixed_later(
        tmp_path: Path, capsys: Any) -> None:
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "10-vpc-cni.conflist").write_text("{not json")
    install.watch(str(conf), ENTRY, 0.0, rounds=3)
    err = capsys.readouterr().err
    assert err.count("10-vpc-cni.conflist") == 1, err
    rewrite_atomic(conf / "10-vpc-cni.conflist", primary(1))
    install.watch(str(conf), ENTRY, 0.0, rounds=1)
    assert "rdma-cni" in chained(conf / "10-vpc-cni.conflist")


def test_dirwatch_times_out_quietly_and_wakes_on_change(tmp_path: Path) -> None:
    w = DirWatch(str(tmp_path))
    try:
        start = time.monotonic()
        assert w.wait(0.2) is False
        assert time.monotonic() - start >= 0.19
        threading.Timer(0.1, (tmp_path / "x.conflist").touch).start()
        start = time.monotonic()
        assert w.wait(5.0) is True
        assert time.monotonic() - start < 1.0
        (tmp_path / "unrelated-sibling").mkdir(exist_ok=True)
        assert w.rearms == 1
    finally:
        w.close()


def test_polls_where_inotify_is_unavailable(tmp_path: Path, monkeypatch: Any,
                                            capsys: Any) -> None:
    import rdma_cni.tools.confwatch as cw

    monkeypatch.setattr(cw, "open_watch", lambda path, follow=None: None)
    conf = tmp_path / "net.d"
    conf.mkdir()
    rewrite_atomic(conf / "10-vpc-cni.conflist", primary(1))
    install.watch(str(conf), ENTRY, 0.01, rounds=1)
    assert "rdma-cni" in chained(conf / "10-vpc-cni.conflist")
    assert "inotify unavailable" in capsys.readouterr().err


def test_a_writer_that_keeps_removing_the_entry_is_not_fought_at_full_speed(
        tmp_path: Path, capsys: Any) -> None:
    conf = tmp_path / "net.d"
    conf.mkdir()
    path = conf / "10-vpc-cni.conflist"
    rewrite_atomic(path, primary(0))
    stop = threading.Event()
    t = threading.Thread(target=install.watch, args=(str(conf), ENTRY, 60.0),
                         kwargs={"stop": stop}, daemon=True)
    t.start()
    end = time.monotonic() + 3.0
    fights = 0
    while time.monotonic() < end:  # a primary that "corrects" the file at once
        if "rdma-cni" in chained(path):
            rewrite_atomic(path, primary(1))
            fights += 1
        time.sleep(0.005)
    stop.set()
    (conf / "poke").touch()
    t.join(5)
    err = capsys.readouterr().err
    # each fight follows one re-apply: the first few fast, then about one a second
    # (unpaced, the two writers swap the file every few milliseconds)
    assert 6 <= fights <= 6 + 3 + 2, (fights, err)
    assert err.count("another writer keeps removing the entry") == 1


@pytest.mark.parametrize("rewrite", [rewrite_atomic, rewrite_in_place])
def test_a_linked_conflist_follows_the_primary_s_own_file(
        tmp_path: Path, rewrite: Callable[[Path, Any], None]) -> None:
    """The conf dir's first file links to the primary's own file elsewhere: the watch
    edits that file in place (the link stays), and wakes on the primary's writes there
    (the 60 s backstop never comes)."""
    own = tmp_path / "vpc" / "10-vpc-cni.conflist"
    own.parent.mkdir()
    rewrite_atomic(own, primary(1))
    conf = tmp_path / "net.d"
    conf.mkdir()
    view = conf / "10-vpc-cni.conflist"
    view.symlink_to(own)
    stop = threading.Event()
    t = threading.Thread(target=install.watch, args=(str(conf), ENTRY, 60.0),
                         kwargs={"stop": stop}, daemon=True)
    t.start()
    try:
        wait_for(lambda: "rdma-cni" in chained(view), "the entry", 1.0, POLL)
        for gen in range(2, 5):
            rewrite(own, primary(gen))
            wait_for(lambda: "rdma-cni" in chained(view), "the entry", 1.0, POLL)
            assert json.loads(view.read_text())["plugins"][0]["generation"] == gen
            assert os.readlink(view) == str(own)
    finally:
        stop.set()
        (conf / "poke").touch()
        t.join(5)
    assert not t.is_alive()
    assert sorted(os.listdir(own.parent)) == ["10-vpc-cni.conflist"]
