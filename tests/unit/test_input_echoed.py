"""What the input can make the plugin print: an error's texts escaped and bounded
whatever they quote, no number JSON has not got (``NaN``, ``Infinity``, ``1e999``) read
or written, and a key for names that are not valid UTF-8 (an environment's undecodable
bytes, JSON's lone ``\\udXXX`` escapes) instead of an internal error."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.cnijson import STRICT

from rdma_cni.cni import dispatch
from rdma_cni.cni.commands import repeat
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.errors import CniError, Code, ConfigError
from rdma_cni.vocab.attachment import AttachmentKey

ENV = {"CNI_CONTAINERID": "c0ffee01", "CNI_NETNS": "/var/run/netns/pod-a",
       "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
CONF = {"cniVersion": "1.1.0", "name": "vpc-net", "type": "rdma-cni", "mode": "shared"}


@pytest.fixture(autouse=True)
def _metrics_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DEFAULTS, "metricsFile", str(tmp_path / "metrics"))


class Handlers:
    def __init__(self, result: Any = None, fail: BaseException | None = None) -> None:
        self.result, self.fail, self.called = result, fail, False

    def add(self, req: Any) -> Any:
        self.called = True
        if self.fail is not None:
            raise self.fail
        return self.result


def strict(text: str) -> dict[str, Any]:
    """The one document on stdout, read as Go's encoding/json (libcni) reads it."""
    doc, end = STRICT.raw_decode(text)
    assert text[end:].strip() == "" and isinstance(doc, dict), text
    return doc


def run(stdin: bytes, handlers: Handlers, env: dict[str, str] | None = None) -> tuple[int, str]:
    out = io.StringIO()
    rc = dispatch.run({**ENV, "CNI_COMMAND": "ADD", **(env or {})}, stdin, out, io.StringIO(),
                      handlers=handlers)  # type: ignore[arg-type]
    return rc, out.getvalue()


def _printable(text: str) -> bool:
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


@pytest.mark.parametrize("fail", [
    CniError("bad value x\x1b]0;owned\x07\nFAKE LOG LINE" + "A" * 50000, "d\x1b[2J\r" * 999,
             code=Code.NO_ALLOCATION),
    RuntimeError("internal \x1b[2J\nline" + "B" * 50000),
])
def test_an_errors_texts_are_escaped_and_bounded(fail: BaseException) -> None:
    rc, out = run(json.dumps(CONF).encode(), Handlers(fail=fail))
    doc = strict(out)
    assert rc == 1 and doc["code"] in (Code.NO_ALLOCATION, Code.IO_FAILURE), doc
    for key in ("msg", "details"):
        text = doc.get(key, "")
        assert _printable(text) and len(text) <= dispatch.MAX_MESSAGE, (key, text[:200])
    assert "\\x1b" in doc["msg"], doc["msg"][:200]


PREV = {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "sandbox": ENV["CNI_NETNS"]}],
        "ips": [{"address": "203.0.113.5/24", "interface": 0}]}


@pytest.mark.parametrize("number", [b"1e999", b"-1e999", b"NaN", b"Infinity", b"-Infinity"])
def test_a_number_json_has_not_got_is_code_6_before_any_work(number: bytes) -> None:
    prev = json.dumps({**PREV, "routes": [{"dst": "0.0.0.0/0", "metric": 7}]}).encode()
    stdin = json.dumps(CONF).encode()[:-1] + b',"prevResult":' + \
        prev.replace(b'"metric": 7', b'"metric": ' + number) + b"}"
    handlers = Handlers(result=PREV)
    rc, out = run(stdin, handlers)
    doc = strict(out)
    assert rc == 1 and doc["code"] == Code.DECODE_FAILURE, doc
    assert not handlers.called
    assert run(stdin.replace(number, b"1e300"), Handlers(result=PREV))[0] == 0  # finite: fine


def test_a_result_holding_a_non_finite_number_is_never_printed() -> None:
    rc, out = run(json.dumps(CONF).encode(),
                  Handlers(result={**PREV, "routes": [{"dst": "0.0.0.0/0",
                                                       "metric": float("inf")}]}))
    doc = strict(out)  # an error document, not a result no parser reads
    assert rc == 1 and doc["code"] == Code.IO_FAILURE, doc


def test_the_key_of_names_that_are_not_utf8() -> None:
    # valid names keep the key they always had (records written before still match)
    old = hashlib.sha256("\x00".join(["net", "c1", "eth0"]).encode()).hexdigest()[:40]
    assert AttachmentKey("net", "c1", "eth0").digest() == old
    odd = AttachmentKey("n\ud800et", "c1", "eth\udcff")  # JSON's "\ud800", os.environ's 0xff
    assert len(odd.digest()) == 40 and odd.digest() != AttachmentKey("net", "c1", "eth").digest()


@pytest.mark.parametrize("env,name", [({"CNI_IFNAME": "eth\udcff"}, "vpc-net"),
                                      ({}, "vpc\ud800net")])
def test_del_of_names_that_are_not_utf8_succeeds_when_nothing_is_left(
        tmp_path: Path, env: dict[str, str], name: str) -> None:
    conf = {**CONF, "name": name, "dataDir": str(tmp_path / "data"),
            "logFile": str(tmp_path / "log")}
    out = io.StringIO()
    full = {**ENV, **env, "CNI_COMMAND": "DEL"}
    full.pop("CNI_NETNS")
    rc = dispatch.run(full, json.dumps(conf).encode(), out, io.StringIO())
    assert (rc, out.getvalue()) == (0, ""), out.getvalue()


def test_a_repeated_add_reads_the_primarys_names_of_any_shape() -> None:
    netns = ENV["CNI_NETNS"]
    req = SimpleNamespace(netns=netns, netconf=SimpleNamespace(cniConfName="rdma"),
                          prev_result={"interfaces": [{"name": {"a": 1}, "sandbox": netns},
                                                      {"name": ["eth1"], "sandbox": netns},
                                                      "eth1", {"sandbox": netns}]})
    state = SimpleNamespace(result={"interfaces": [{"name": "eth1"}]}, conf_name="rd\x1bma")
    repeat.not_twice(req, state)  # type: ignore[arg-type]  # none of them is a name: no clash
    req.prev_result["interfaces"].append({"name": "eth1", "sandbox": netns})
    with pytest.raises(ConfigError) as exc:
        repeat.not_twice(req, state)  # type: ignore[arg-type]
    assert '"eth1"' in exc.value.msg and '"rd\\u001bma"' in exc.value.msg, exc.value.msg
