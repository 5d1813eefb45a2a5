"""GC goes on past an attachment it cannot release and reports them all at the end (the
spec: "If an error is encountered, a plugin should continue; removing as many resources
as possible, and report the errors back to the runtime"). Before, a CNI error was only
logged and GC answered success, and any other error (the store's, say) ended GC at that
attachment, leaving the rest."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rdma_cni.cni.commands import gc
from rdma_cni.errors import CniError, Code, IOFailure, TryAgain
from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey


def _req(data: Path) -> Any:
    conf = {"name": "net", "dataDir": str(data), gc.VALID: []}
    return SimpleNamespace(conf=conf, network="net", instance="")


def _node(tmp_path: Path, ids: list[str]) -> Path:
    data = tmp_path / "data"
    store = Store(str(data))
    with store.lock():
        for cid in ids:
            assert store.claim_nic(f"rnic{cid}", AttachmentKey("net", cid, "eth0"), "eth1")
    return data


@pytest.mark.parametrize(("fails", "code"), [
    ({"a": OSError(13, "Permission denied"), "b": TryAgain("NIC not back")}, Code.IO_FAILURE),
    ({"a": TryAgain("NIC not back"), "c": TryAgain("NIC not back")}, Code.TRY_AGAIN_LATER),
])
def test_gc_goes_on_and_reports_what_it_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             fails: dict[str, Exception], code: Code) -> None:
    data = _node(tmp_path, ["a", "b", "c"])
    seen: list[str] = []
    real = gc.collect

    def collect(store: Store, key: AttachmentKey) -> CniError | None:
        seen.append(key.container_id)
        exc = fails.get(key.container_id)
        if isinstance(exc, OSError):
            raise exc
        return exc if isinstance(exc, CniError) else real(store, key)

    monkeypatch.setattr(gc, "collect", collect)
    with pytest.raises(CniError) as err:
        gc.cmd_gc(_req(data))
    assert seen == ["a", "b", "c"]
    assert err.value.code == code and all(f'"{cid}"' in err.value.msg for cid in fails)
    left = {k.container_id for k, _ in Store(str(data)).nic_claims().values()}
    assert left == set(fails)


def test_gc_without_a_list_changes_nothing(tmp_path: Path) -> None:
    data = _node(tmp_path, ["a"])
    req = _req(data)
    del req.conf[gc.VALID]
    with pytest.raises(CniError) as err:
        gc.cmd_gc(req)
    assert err.value.code == Code.INVALID_CONFIG
    assert len(Store(str(data)).nic_claims()) == 1
    assert not isinstance(err.value, IOFailure)
