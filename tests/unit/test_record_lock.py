"""The lock of one attachment's state record (rdma_cni/store/recordlock.py) and what holds
it: an ADD's steps hold it and not the store lock, so other pods' requests go on during
them; a takeover and a purge hold it, so neither lands in the middle of a step."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.fakenode import POD, PRIO, SHARED, Node

from rdma_cni import testhooks
from rdma_cni.cni.commands import add as add_cmd
from rdma_cni.cni.commands.owner import take_over
from rdma_cni.cni.request import Request
from rdma_cni.datapath import sublinks
from rdma_cni.errors import TryAgain
from rdma_cni.store.core import Store
from rdma_cni.store.files import identity_of
from rdma_cni.store.recordlock import record_locked
from rdma_cni.store.state import AttachmentState, make_state
from rdma_cni.vocab.kinds import PENDING
from rdma_cni.vocab.plan import IfacePlan

TOKEN = "0011223344556677"
OTHER = "ffeeddccbbaa9988"


def _locked_elsewhere(path: str | Path) -> bool:
    """Whether another open file description cannot take LOCK_EX on ``path`` now."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        assert exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        return True
    finally:
        os.close(fd)
    return False


@contextmanager
def _held_by_another(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield fd
    finally:
        os.close(fd)


def _record(tmp_path: Path, name: str = "r.json", text: str = "{}") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_record_in_place_is_held_for_the_body_and_let_go_after(tmp_path: Path) -> None:
    path = _record(tmp_path)
    with record_locked(str(path), 1.0) as held:
        assert held is not None and held == identity_of(str(path))
        assert _locked_elsewhere(path)
    assert not _locked_elsewhere(path)


def test_no_record_holds_nothing(tmp_path: Path) -> None:
    with record_locked(str(tmp_path / "none.json"), 1.0) as held:
        assert held is None


def test_a_record_replaced_during_the_wait_is_held_as_it_is_now(tmp_path: Path) -> None:
    """A takeover held the old file and put a new one in its place: the waiter ends up
    holding the new one, not the file its first open found."""
    path = _record(tmp_path, text='{"old": 1}')
    got: list[Any] = []
    with _held_by_another(path):
        waiter = threading.Thread(target=lambda: got.append(_hold_once(path)))
        waiter.start()
        time.sleep(0.1)
        new = _record(tmp_path, "new.json", '{"new": 1}')
        os.rename(new, path)
    waiter.join(5)
    assert got == [identity_of(str(path))]


def test_a_record_removed_during_the_wait_reads_as_none(tmp_path: Path) -> None:
    path = _record(tmp_path)
    got: list[Any] = []
    with _held_by_another(path):
        waiter = threading.Thread(target=lambda: got.append(_hold_once(path)))
        waiter.start()
        time.sleep(0.1)
        path.unlink()
    waiter.join(5)
    assert got == [None]


def test_a_wait_past_the_deadline_is_try_again(tmp_path: Path) -> None:
    """The holder here is this process's own other descriptor, as another request's
    thread in `serve` would be: the message does not say it is another process."""
    path = _record(tmp_path)
    with _held_by_another(path), \
            pytest.raises(TryAgain, match="still held by another request after") as e, \
            record_locked(str(path), 0.05):
        pass
    assert "process" not in e.value.msg


def _hold_once(path: Path) -> Any:
    with record_locked(str(path), 5.0) as held:
        return held


# an ADD's steps, a takeover, a purge --------------------------------------------


def _request(tmp_path: Path) -> Request:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": "rdma", "type": "rdma-cni",
                            "mode": "shared-multi", "dataDir": str(tmp_path / "data")}
    return Request("ADD", conf, "1.0.0", container_id="c0ffee", netns=POD, ifname="eth0")


def _state(status: str, ps: list[IfacePlan], ours: dict[str, Any] | None) -> AttachmentState:
    return make_state(status, "shared-multi", POD, "p1", "uid-p1", PRIO, ps, ours,
                      request=TOKEN)


class _Add:
    """ADD's last stage (``_apply``) on a thread of its own, over the in-memory kernel,
    stopped inside its first step (the name check) until :meth:`go`; and, when given
    ``then``, between that step and the next until ``then`` is set (a takeover waiting
    for the lock otherwise comes in only once the steps are done: a waiter polls, the
    ADD takes the lock again at once)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                 look: Any = None, then: threading.Event | None = None) -> None:
        self.node, self.req = Node(), _request(tmp_path)
        self.store = Store(str(tmp_path / "data"))
        self.pending = self.store.put_state(self.req.key, _state(PENDING, SHARED, None))
        self.record = self.store._state_path(self.req.key)
        self.inside, self.release = threading.Event(), threading.Event()
        self.outcome: list[BaseException | dict[str, Any]] = []
        real, seen = sublinks.check_name, []

        def stopping(ctx: Any, p: IfacePlan) -> None:
            if not seen:
                seen.append(p)
                if look is not None:
                    look(self)
                self.inside.set()
                assert self.release.wait(10)
            real(ctx, p)
        monkeypatch.setattr(sublinks, "check_name", stopping)
        if then is not None:
            monkeypatch.setattr(testhooks, "step_seams",
                                lambda: lambda k: k != 1 or then.wait(10))
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        assert self.inside.wait(10)

    def _run(self) -> None:
        session = self.node.session()
        try:
            self.outcome.append(add_cmd._apply(self.req, self.req.netconf, self.store,
                                               session, SHARED, TOKEN, _state, self.pending))
        except BaseException as exc:
            self.outcome.append(exc)
        finally:
            session.close()

    def go(self) -> BaseException | dict[str, Any]:
        self.release.set()
        self.thread.join(10)
        return self.outcome[0]


def test_a_step_holds_its_record_and_leaves_the_store_lock_to_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, bool] = {}

    def look(add: _Add) -> None:
        seen["record"] = _locked_elsewhere(add.record)
        seen["store"] = _locked_elsewhere(add.store.lock_path)
    add = _Add(tmp_path, monkeypatch, look)
    out = add.go()
    assert seen == {"record": True, "store": False}
    assert isinstance(out, dict) and [i["name"] for i in out["interfaces"]] == ["eth1", "eth2"]


def _blocked_until_the_step_ends(add: _Add, done: threading.Event, action: Any
                                 ) -> tuple[bool, BaseException | Any]:
    """Run ``action`` on another thread while ``add`` is inside its step (``done`` set
    once it returns): whether it was still waiting a moment later; then the ADD's
    outcome."""
    worker = threading.Thread(target=lambda: (action(), done.set()))
    worker.start()
    waited = not done.wait(0.3)
    out = add.go()
    worker.join(10)
    assert done.is_set()
    return waited, out


def test_a_takeover_waits_for_the_step_under_way_then_nothing_more_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = threading.Event()
    add = _Add(tmp_path, monkeypatch, then=done)
    other = Store(str(tmp_path / "data"))
    waited, out = _blocked_until_the_step_ends(
        add, done, lambda: take_over(other, add.req.key, OTHER))
    assert waited
    assert isinstance(out, TryAgain) and "another request's now" in str(out)
    assert add.node.pod is not None
    # the name check ran to its end; nothing after it: no sub-link made
    assert sorted(lk.name for lk in add.node.kernel.port(add.node.pod).links()) == \
        ["eth0", "lo"]
    saved = other.get_state(add.req.key)
    assert saved is not None and saved.request == OTHER


def test_a_purge_waits_for_the_step_under_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = threading.Event()
    add = _Add(tmp_path, monkeypatch, then=done)
    other = Store(str(tmp_path / "data"))
    waited, out = _blocked_until_the_step_ends(add, done, lambda: other.purge(add.req.key))
    assert waited
    assert isinstance(out, TryAgain) and "another request's now" in str(out)
    assert other.get_state(add.req.key) is None
