"""The CNI protocol core: required variables, version gates, decoding, the single
stdout document and the single exception-to-error mapping (dispatch.run in-process)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rdma_cni import errors, log
from rdma_cni.cni import dispatch, versions
from rdma_cni.cni.request import Request
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.errors import CniError, Code

ENV = {
    "CNI_CONTAINERID": "c0ffee01",
    "CNI_NETNS": "/var/run/netns/pod-a",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/opt/cni/bin",
}
REQUIRED = {  # SPEC.md 1.1.0, "Execution Protocol": CNI_PATH is optional for all three
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
}
OUR_RESULT = {
    "cniVersion": "1.1.0",
    "interfaces": [{"name": "eth1", "mac": "02:00:00:00:00:01", "mtu": 1500,
                    "sandbox": "/var/run/netns/pod-a"}],
    "ips": [{"address": "198.51.100.10/24", "interface": 0}],
    "routes": [{"dst": "198.51.100.0/24", "table": 100}],
    "dns": {},
}


@pytest.fixture(autouse=True)
def _metrics_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dispatcher counts every operation in the metrics file of its config, the node's
    by default (``DEFAULTS``, read at each call): keep it off the host's /run."""
    monkeypatch.setitem(DEFAULTS, "metricsFile", str(tmp_path / "metrics"))


@dataclass
class FakeHandlers:
    """Records what the dispatcher hands over; raises ``fail`` when set."""

    result: dict[str, Any] = field(default_factory=lambda: json.loads(json.dumps(OUR_RESULT)))
    fail: BaseException | None = None
    calls: list[tuple[str, Request]] = field(default_factory=list)

    def _enter(self, name: str, req: Request) -> None:
        self.calls.append((name, req))
        if self.fail is not None:
            raise self.fail

    def add(self, req: Request) -> dict[str, Any]:
        self._enter("add", req)
        return self.result

    def delete(self, req: Request) -> None:
        self._enter("delete", req)

    def check(self, req: Request) -> None:
        self._enter("check", req)

    def status(self, req: Request) -> None:
        self._enter("status", req)

    def gc(self, req: Request) -> None:
        self._enter("gc", req)


@dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str
    handlers: FakeHandlers

    @property
    def doc(self) -> dict[str, Any]:
        return only_doc(self.stdout)


def only_doc(text: str) -> dict[str, Any]:
    """The one JSON document on stdout; fails if there is anything else."""
    doc, end = json.JSONDecoder().raw_decode(text)
    assert text[end:].strip() == "", f"more than one document on stdout: {text!r}"
    assert "Traceback" not in text
    assert isinstance(doc, dict)
    return doc


def conf(version: str = "1.1.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "vpc-net", "type": "rdma-cni", "mode": "shared",
            **extra}


def invoke(command: str | None, stdin: bytes | dict[str, Any] | None = None,
           env: dict[str, str] | None = None, handlers: FakeHandlers | None = None,
           drop: tuple[str, ...] = ()) -> Outcome:
    full = dict(ENV if env is None else env)
    if command is not None:
        full["CNI_COMMAND"] = command
    for name in drop:
        full.pop(name, None)
    raw = json.dumps(conf() if stdin is None else stdin).encode() \
        if not isinstance(stdin, bytes) else stdin
    fake = handlers or FakeHandlers()
    out, err = io.StringIO(), io.StringIO()
    status = dispatch.run(full, raw, out, err, handlers=fake)
    return Outcome(status, out.getvalue(), err.getvalue(), fake)


def assert_error(o: Outcome, code: int, *needles: str) -> dict[str, Any]:
    assert o.status == 1
    doc = o.doc
    assert doc["code"] == code, doc
    assert set(doc) <= {"cniVersion", "code", "msg", "details"}
    assert doc["cniVersion"] in versions.SUPPORTED
    for needle in needles:
        assert needle in doc["msg"], doc
    return doc


# -- environment ----------------------------------------------------------------

@pytest.mark.parametrize(("command", "var"),
                         [(c, v) for c, names in REQUIRED.items() for v in names])
@pytest.mark.parametrize("how", ["unset", "empty"])
def test_missing_required_variable_is_code_4_naming_it(command: str, var: str, how: str) -> None:
    env = dict(ENV)
    if how == "unset":
        env.pop(var)
    else:
        env[var] = ""
    o = invoke(command, env=env)
    assert_error(o, Code.INVALID_ENV, var)
    assert o.handlers.calls == []


def test_all_missing_variables_are_named_at_once() -> None:
    o = invoke("ADD", env={})
    assert_error(o, 4, "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME")
    assert "CNI_PATH" not in o.stdout


@pytest.mark.parametrize("command", sorted(REQUIRED))
@pytest.mark.parametrize("how", ["unset", "empty"])
def test_cni_path_is_optional(command: str, how: str) -> None:
    """SPEC.md lists CNI_PATH among the optional parameters of ADD, DEL and CHECK (the
    plugin delegates to no other): its absence reaches the handler."""
    env = dict(ENV)
    if how == "unset":
        env.pop("CNI_PATH")
    else:
        env["CNI_PATH"] = ""
    o = invoke(command, env=env)
    assert o.status == 0, o.stdout
    (_name, req), = o.handlers.calls
    assert (req.container_id, req.cni_path) == ("c0ffee01", "")


def test_del_without_netns_reaches_the_handler() -> None:
    o = invoke("DEL", drop=("CNI_NETNS",))
    assert (o.status, o.stdout) == (0, "")
    (name, req), = o.handlers.calls
    assert (name, req.netns, req.container_id, req.ifname) == ("delete", "", "c0ffee01", "eth0")


@pytest.mark.parametrize("command", ["STATUS", "GC"])
def test_status_and_gc_need_no_container_variables(command: str) -> None:
    o = invoke(command, env={})
    assert (o.status, o.stdout) == (0, "")
    assert [c for c, _ in o.handlers.calls] == [command.lower()]


@pytest.mark.parametrize("value", ["-abc", "_abc", ".abc", "abc/def", "abc def", "abc\n",
                                   "abc;rm", "ab\x00c", "é1", "x" * 1025])
def test_invalid_container_id_is_code_4(value: str) -> None:
    assert_error(invoke("ADD", env={**ENV, "CNI_CONTAINERID": value}), 4, "CNI_CONTAINERID")


@pytest.mark.parametrize("value", ["a", "0", "abc_1.2-3", "F" * 64, "x" * 1024])
def test_valid_container_ids_are_accepted(value: str) -> None:
    o = invoke("ADD", env={**ENV, "CNI_CONTAINERID": value})
    assert o.status == 0
    assert o.handlers.calls[0][1].container_id == value


@pytest.mark.parametrize("value", ["a" * 16, ".", "..", "a/b", "a:b", "a b", "a\tb", "eth0\n",
                                   "é" * 8, "\u00a0eth"])
def test_invalid_ifname_is_code_4(value: str) -> None:
    assert_error(invoke("ADD", env={**ENV, "CNI_IFNAME": value}), 4, "CNI_IFNAME")


@pytest.mark.parametrize("value", ["eth0", "a" * 15, "net-1.2_x", "é" * 7])
def test_valid_ifnames_are_accepted(value: str) -> None:
    o = invoke("ADD", env={**ENV, "CNI_IFNAME": value})
    assert o.status == 0
    assert o.handlers.calls[0][1].ifname == value


@pytest.mark.parametrize("value", ["relative/netns", "/var/run/netns/a\nb", "/x\x00y"])
def test_invalid_netns_is_code_4(value: str) -> None:
    assert_error(invoke("ADD", env={**ENV, "CNI_NETNS": value}), 4, "CNI_NETNS")


@pytest.mark.parametrize("command", ["add", "FOO", "ADD ", "DELETE", "x" * 500])
def test_unknown_command_is_code_4(command: str) -> None:
    o = invoke(command)
    doc = assert_error(o, 4, "CNI_COMMAND")
    assert len(doc["msg"]) < 200
    assert o.handlers.calls == []


def test_cni_args_reach_the_handler_typed() -> None:
    args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u-1;FOO=bar"
    o = invoke("ADD", env={**ENV, "CNI_ARGS": args})
    req = o.handlers.calls[0][1]
    assert (req.args.pod, req.args.pod_uid, req.args.extra) == ("ns/p", "u-1", {"FOO": "bar"})


def test_unknown_cni_args_without_ignore_unknown_is_code_4() -> None:
    assert_error(invoke("ADD", env={**ENV, "CNI_ARGS": "FOO=bar"}), 4, "CNI_ARGS", "FOO")


def test_request_carries_config_and_key() -> None:
    o = invoke("ADD", conf("0.4.0", extra={"a": 1}))
    req = o.handlers.calls[0][1]
    assert req.cni_version == "0.4.0"
    assert req.conf["extra"] == {"a": 1}
    assert (req.key.network, req.key.container_id, req.key.ifname) == ("vpc-net", "c0ffee01",
                                                                        "eth0")


# -- versions -----------------------------------------------------------------

@pytest.mark.parametrize("version", ["0.3.0", "0.3.1"])
def test_check_below_040_is_code_1(version: str) -> None:
    o = invoke("CHECK", conf(version))
    doc = assert_error(o, Code.INCOMPATIBLE_VERSION, "CHECK", "0.4.0")
    assert doc["cniVersion"] == version
    assert o.handlers.calls == []


@pytest.mark.parametrize("command", ["STATUS", "GC"])
@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0", "1.0.0"])
def test_status_and_gc_below_110_are_code_1(command: str, version: str) -> None:
    o = invoke(command, conf(version))
    assert_error(o, 1, command, "1.1.0")
    assert o.handlers.calls == []


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
def test_check_from_040_on_succeeds_silently(version: str) -> None:
    o = invoke("CHECK", conf(version))
    assert (o.status, o.stdout) == (0, "")
    assert o.handlers.calls[0][0] == "check"


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "STATUS", "GC"])
@pytest.mark.parametrize("bad", ["0.2.0", "0.1.0", "2.0.0", "1.1", "1.1.0.0", "", "garbage",
                                 None, 110, ["1.1.0"], "v1.1.0", " 1.1.0"])
def test_unsupported_or_invalid_cni_version_is_code_1(command: str, bad: object) -> None:
    o = invoke(command, {"name": "n", "cniVersion": bad})
    assert_error(o, 1)
    assert o.handlers.calls == []


def test_missing_cni_version_is_code_1() -> None:
    assert_error(invoke("ADD", {"name": "n", "type": "rdma-cni"}), 1, "cniVersion")


def test_error_document_uses_the_request_version() -> None:
    o = invoke("ADD", conf("0.4.0"), handlers=FakeHandlers(fail=errors.ConfigError("bad")))
    assert o.doc == {"cniVersion": "0.4.0", "code": 7, "msg": "bad"}


# -- decoding -----------------------------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("stdin", [b"", b"   ", b"not json", b"{", b"[1, 2]", b'"text"', b"42",
                                   b"null", b"\xff\xfe\x00garbage", DEEP,
                                   b'{"cniVersion": "1.1.0", "a": ' + DEEP + b"}"])
@pytest.mark.parametrize("command", ["ADD", "DEL"])
def test_undecodable_stdin_is_code_6(command: str, stdin: bytes) -> None:
    o = invoke(command, stdin)
    assert_error(o, Code.DECODE_FAILURE, "network configuration")
    assert o.handlers.calls == []


def test_stdin_larger_than_the_limit_is_code_6() -> None:
    big = json.dumps(conf(pad="x" * dispatch.MAX_STDIN)).encode()
    assert_error(invoke("ADD", big), 6, "larger than")


@pytest.mark.parametrize("depth", [100, 500, 900])
def test_deep_nesting_anywhere_is_code_6_not_an_internal_error(depth: int) -> None:
    nested = "[" * depth + "]" * depth
    raw = ('{"cniVersion":"1.0.0","name":"n","prevResult":{"interfaces":[{"name":"eth0","x":'
           + nested + "}]}}").encode()
    o = invoke("ADD", raw)
    assert_error(o, 6, "nested")
    assert "Traceback" not in o.stderr


def test_ordinary_nesting_is_accepted() -> None:
    o = invoke("ADD", conf(ipam={"ranges": {"198.51.100.0/24": {"exclude": ["198.51.100.9"]}}},
                           runtimeConfig={"a": {"b": {"c": {"d": [[1]]}}}}))
    assert o.status == 0


@pytest.mark.parametrize("prev", [
    "text", [], 5,
    {"interfaces": "eth0"},
    {"interfaces": [1]},
    {"ips": {"address": "198.51.100.2/24"}},
    {"ips": [{"interface": 0}]},
    {"ips": [{"address": 5}]},
    {"interfaces": [{"name": "eth0"}], "ips": [{"address": "198.51.100.2/24", "interface": 1}]},
    {"interfaces": [{"name": "eth0"}], "ips": [{"address": "198.51.100.2/24", "interface": -1}]},
    {"interfaces": [{"name": "eth0"}],
     "ips": [{"address": "198.51.100.2/24", "interface": True}]},
    {"routes": [[]]},
    {"dns": ["8.8.8.8"]},
])
@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_malformed_prev_result_is_code_6(command: str, prev: object) -> None:
    o = invoke(command, conf(prevResult=prev))
    assert_error(o, 6, "prevResult")
    assert o.handlers.calls == []


def test_del_tolerates_a_malformed_prev_result() -> None:
    o = invoke("DEL", conf(prevResult={"interfaces": "eth0"}))
    assert (o.status, o.stdout) == (0, "")
    assert o.handlers.calls[0][1].prev_result is None


def test_prev_result_reaches_the_handler_in_110_form() -> None:
    prev = {"cniVersion": "0.4.0", "interfaces": [{"name": "eth0", "mac": "xx", "sandbox": "?"}],
            "ips": [{"version": "4", "address": "198.51.100.2/24", "interface": 0}]}
    o = invoke("ADD", conf("0.4.0", prevResult=prev))
    got = o.handlers.calls[0][1].prev_result
    assert got == {"cniVersion": "1.1.0", "interfaces": prev["interfaces"],
                   "ips": [{"address": "198.51.100.2/24", "interface": 0}]}


# -- handler failures ---------------------------------------------------------

ERROR_CLASSES = sorted(
    (cls for cls in vars(errors).values()
     if isinstance(cls, type) and issubclass(cls, CniError) and cls is not CniError),
    key=lambda cls: int(cls.code))


def test_every_design_code_has_an_error_class() -> None:
    codes = {int(cls.code) for cls in ERROR_CLASSES}
    assert codes >= {1, 2, 4, 5, 6, 7, 11, 50, 100, 101, 102, 103, 104, 105, 106}
    assert {int(c) for c in Code} >= {1, 2, 3, 4, 5, 6, 7, 11, 50, 51, *range(100, 107)}


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "STATUS", "GC"])
def test_handler_cni_error_becomes_its_code_and_message(cls: type[CniError], command: str) -> None:
    exc = cls(f"failed to do {command}: {cls.__name__}", "some details")
    o = invoke(command, handlers=FakeHandlers(fail=exc))
    assert o.status == 1
    assert o.doc == {"cniVersion": "1.1.0", "code": int(cls.code),
                     "msg": f"failed to do {command}: {cls.__name__}", "details": "some details"}


@pytest.mark.parametrize("code", [3, 51])
def test_explicit_code_on_a_cni_error(code: int) -> None:
    o = invoke("ADD", handlers=FakeHandlers(fail=CniError("x", code=code)))
    assert o.doc == {"cniVersion": "1.1.0", "code": code, "msg": "x"}


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyError("interfaces"),
                                 OSError(113, "No route to host"), ValueError("v" * 5000),
                                 RecursionError("deep"), AssertionError()],
                         ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "STATUS", "GC"])
def test_plain_exception_becomes_code_5_without_traceback(exc: Exception, command: str) -> None:
    o = invoke(command, handlers=FakeHandlers(fail=exc))
    doc = assert_error(o, Code.IO_FAILURE, command, "internal error", type(exc).__name__)
    assert len(doc["msg"]) <= 1000
    assert "Traceback" not in o.stdout


def test_unserialisable_result_becomes_one_error_document() -> None:
    fake = FakeHandlers(result={"cniVersion": "1.1.0", "interfaces": [{"name": object()}]})
    assert_error(invoke("ADD", handlers=fake), 5, "TypeError")


# -- output -------------------------------------------------------------------

@pytest.mark.parametrize("command", ["DEL", "CHECK", "STATUS", "GC"])
def test_success_without_result_prints_nothing(command: str) -> None:
    o = invoke(command)
    assert (o.status, o.stdout) == (0, "")


@pytest.mark.parametrize("version", versions.SUPPORTED)
def test_add_prints_the_result_converted_to_the_request_version(version: str) -> None:
    o = invoke("ADD", conf(version))
    assert o.status == 0
    assert o.doc == versions.convert(OUR_RESULT, version)
    assert o.doc["cniVersion"] == version
    assert ("version" in o.doc["ips"][0]) == (version < "1.0.0")
    assert ("mtu" in o.doc["interfaces"][0]) == (version == "1.1.0")
    assert ("table" in o.doc["routes"][0]) == (version == "1.1.0")


@pytest.mark.parametrize("version", versions.SUPPORTED)
def test_version_echoes_each_supported_version(version: str) -> None:
    o = invoke("VERSION", {"cniVersion": version}, env={})
    assert o.status == 0
    assert o.doc == {"cniVersion": version, "supportedVersions": list(versions.SUPPORTED)}


@pytest.mark.parametrize("stdin", [b"", b"\n", b"{}", b'{"cniVersion": "0.2.0"}',
                                   b'{"cniVersion": ["1.0.0"]}', b"garbage", b"[]", DEEP,
                                   b" " * (dispatch.MAX_STDIN + 1)])
def test_version_never_fails_and_answers_latest(stdin: bytes) -> None:
    o = invoke("VERSION", stdin, env={})
    assert o.status == 0
    assert o.doc == {"cniVersion": "1.1.0",
                     "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}
    assert o.handlers.calls == []


def test_without_cni_command_prints_the_about_text() -> None:
    o = invoke(None, b"whatever")
    assert (o.status, o.stdout) == (0, "")
    assert "rdma-cni" in o.stderr and "CNI_COMMAND" in o.stderr
    assert o.stderr.count("\n") <= 5
    assert o.handlers.calls == []


def test_on_request_sees_the_validated_request() -> None:
    seen: list[Request] = []
    out = io.StringIO()
    status = dispatch.run({**ENV, "CNI_COMMAND": "DEL"}, json.dumps(conf()).encode(), out,
                          handlers=FakeHandlers(), on_request=seen.append)
    assert (status, out.getvalue(), [r.command for r in seen]) == (0, "", ["DEL"])


def test_internal_error_traceback_goes_to_the_log_file_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logfile = tmp_path / "rdma-cni.log"
    logger = logging.getLogger("rdma_cni")
    try:
        log.setup({"logFile": str(logfile), "logLevel": "debug"})
        o = invoke("ADD", handlers=FakeHandlers(fail=RuntimeError("kaboom")))
    finally:
        for handler in logger.handlers:
            handler.close()
        logger.handlers.clear()
    assert o.doc["code"] == 5
    err = capsys.readouterr().err
    assert "internal error" in err and "Traceback" not in err
    text = logfile.read_text()
    assert "Traceback" in text and "RuntimeError: kaboom" in text


# -- the default handlers: chaining and pass-through -------------------------

ANNOTATION = "k8s.volcengine.com/pod-networks"
VPC_PREV = {
    "cniVersion": "0.4.0",
    "interfaces": [{"name": "eth0", "mac": "vpc-cni:eni-0a1b", "sandbox": "not a path"},
                   {"name": "veth1", "mac": "", "sandbox": ""}],
    "ips": [{"version": "4", "address": "198.51.100.7/24", "gateway": "198.51.100.1",
             "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "198.51.100.1"}],
    "dns": {"nameservers": ["198.51.100.53"]},
}


def default_run(command: str, body: dict[str, Any], tmp: Path) -> tuple[int, str]:
    body = {"dataDir": str(tmp / "data"), "logFile": str(tmp / "log"), **body}
    out = io.StringIO()
    status = dispatch.run({**ENV, "CNI_COMMAND": command}, json.dumps(body).encode(), out,
                          io.StringIO())
    return status, out.getvalue()


def with_annotation(value: object, **extra: Any) -> dict[str, Any]:
    return conf("0.4.0", prevResult=VPC_PREV,
                runtimeConfig={"io.kubernetes.cri.pod-annotations": {ANNOTATION: value}},
                **extra)


@pytest.mark.parametrize("body", [
    conf("0.4.0", prevResult=VPC_PREV),
    with_annotation("[]"),
    with_annotation('[{"cniConf": {"name": "other", "weird": [1, {"x": null}]}, "zz": 1}]'),
    with_annotation('[{"cniConf": {"name": "rdma"}}]', cniConfName="rdma-b"),
    conf("0.4.0", prevResult=VPC_PREV, runtimeConfig={"portMappings": []}),
], ids=["no-annotation", "empty-list", "other-networks", "other-conf-name", "no-capability"])
def test_pass_through_add_returns_prev_result_unchanged(body: dict[str, Any],
                                                        tmp_path: Path) -> None:
    status, out = default_run("ADD", body, tmp_path)
    assert status == 0
    assert only_doc(out) == VPC_PREV


@pytest.mark.parametrize("version", [
    "0.2.0", "0.1.0", "5678.456", "1.1", " 0.4.0", 4, 0.4, True, ["0.4.0"], {"v": 1}])
@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_a_prev_result_in_a_version_the_plugin_cannot_read_is_code_1(
        command: str, version: object, tmp_path: Path) -> None:
    """libcni hands prevResult over in the config's version. One in a version this plugin
    cannot read (0.2.0's ``ip4`` shape) was passed on relabelled as the config's: the
    runtime found none of the primary's addresses in the result."""
    prev = {"cniVersion": version, "ip4": {"ip": "198.51.100.7/24"}}
    o = invoke(command, conf("0.4.0", prevResult=prev))
    doc = assert_error(o, 1, "prevResult has cniVersion", "supported versions are")
    assert doc["cniVersion"] == "0.4.0"
    assert o.handlers.calls == []
    status, out = default_run(command, conf("0.4.0", prevResult=prev), tmp_path)  # pass-through
    assert status == 1 and only_doc(out)["code"] == 1


def test_del_tolerates_a_prev_result_in_a_version_it_cannot_read() -> None:
    o = invoke("DEL", conf("0.4.0", prevResult={"cniVersion": "0.2.0", "ip4": {}}))
    assert (o.status, o.stdout) == (0, "")
    assert o.handlers.calls[0][1].prev_result is None


@pytest.mark.parametrize("prev_version", [*versions.SUPPORTED, None, "", "drop"])
@pytest.mark.parametrize("version", versions.SUPPORTED)
def test_a_pass_through_converts_a_prev_result_of_another_supported_version(
        version: str, prev_version: object, tmp_path: Path) -> None:
    """0.3.0 to 1.1.0 share one shape: a prevResult in another of them (or without a
    version: taken as the config's, as libcni's ParsePrevResult does) comes back in the
    config's version."""
    prev = {**VPC_PREV, "cniVersion": prev_version}
    if prev_version == "drop":
        del prev["cniVersion"]
    status, out = default_run("ADD", conf(version, prevResult=prev), tmp_path)
    assert status == 0
    assert only_doc(out) == versions.convert(versions.normalize_prev_result(VPC_PREV), version)


def test_pass_through_tolerates_unknown_top_level_keys_and_bad_mode(tmp_path: Path) -> None:
    body = conf("1.0.0", somethingElse={"x": [1]}, mode="not-checked-on-pass-through")
    status, out = default_run("ADD", body, tmp_path)
    assert (status, only_doc(out)) == (0, versions.convert(versions.empty_result(), "1.0.0"))


@pytest.mark.parametrize("version", versions.SUPPORTED)
def test_add_alone_without_blocks_returns_an_empty_result(version: str, tmp_path: Path) -> None:
    status, out = default_run("ADD", conf(version), tmp_path)
    doc = only_doc(out)
    assert status == 0
    assert (doc["cniVersion"], doc["interfaces"], doc["ips"], doc["routes"]) == (version, [],
                                                                                 [], [])


@pytest.mark.parametrize("command", ["DEL", "CHECK"])
def test_pass_through_del_and_check_succeed_silently(command: str, tmp_path: Path) -> None:
    for body in (conf("0.4.0", prevResult=VPC_PREV), with_annotation("[]"), conf("1.1.0")):
        assert default_run(command, body, tmp_path) == (0, "")


@pytest.mark.parametrize(("value", "needle"), [
    ("not json", "not valid JSON"),
    ('{"cniConf": {"name": "rdma"}}', "JSON list"),
    ("[1]", "block 0 is not an object"),
    ('[{"cniConf": {"name": "other"}}, {"cniConf": {}}]', "block 1 has no cniConf.name"),
    (["a list, not a string"], "expected a JSON string"),
])
@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_malformed_annotation_is_code_7_naming_it(value: object, needle: str, command: str,
                                                  tmp_path: Path) -> None:
    status, out = default_run(command, with_annotation(value), tmp_path)
    doc = only_doc(out)
    assert (status, doc["code"]) == (1, 7)
    assert ANNOTATION in doc["msg"] and needle in doc["msg"]


def test_more_blocks_than_max_interfaces_is_code_106(tmp_path: Path) -> None:
    blocks = json.dumps([{"cniConf": {"name": "rdma"}}] * 3)
    status, out = default_run("ADD", with_annotation(blocks, maxInterfaces=2), tmp_path)
    doc = only_doc(out)
    assert (status, doc["code"]) == (1, 106)
    assert "3" in doc["msg"] and "maxInterfaces" in doc["msg"]


def test_shared_host_with_two_blocks_is_an_error(tmp_path: Path) -> None:
    blocks = json.dumps([{"cniConf": {"name": "rdma"}}, {"cniConf": {"name": "rdma"}}])
    body = with_annotation(blocks, mode="shared-host")
    status, out = default_run("ADD", body, tmp_path)
    doc = only_doc(out)
    assert (status, doc["code"]) == (1, 7)
    assert "shared-host" in doc["msg"]
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("block", [
    {"cniConf": {"name": "rdma"}, "unknownKey": 1},
    {"cniConf": {"name": "rdma", "extra": True}},
    {"cniConf": {"name": "rdma"}, "deviceConf": {"ifName": "eth1", "bogus": 1}},
    {"cniConf": {"name": "rdma"}, "deviceConf": {"ifName": "../x"}},
])
def test_our_block_is_strict(block: dict[str, Any], tmp_path: Path) -> None:
    status, out = default_run("ADD", with_annotation(json.dumps([block])), tmp_path)
    doc = only_doc(out)
    assert (status, doc["code"]) == (1, 7)
    assert ANNOTATION in doc["msg"] and "block 0" in doc["msg"]
    assert not (tmp_path / "data").exists()


# -- import cost --------------------------------------------------------------

IMPORT_PROBE = r"""
import io, json, sys
from rdma_cni.cni import dispatch
env = {"CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_PATH": "/opt/cni/bin"}
prev = {"cniVersion": "0.4.0", "interfaces": [{"name": "eth0", "mac": "odd", "sandbox": "?"}],
        "ips": [{"version": "4", "address": "198.51.100.7/24", "interface": 0}]}
ann = {"k8s.volcengine.com/pod-networks": '[{"cniConf": {"name": "other"}}]'}
body = {"cniVersion": "0.4.0", "name": "vpc", "type": "rdma-cni", "mode": "shared",
        "logFile": "/nonexistent/x", "metricsFile": sys.argv[1], "prevResult": prev,
        "runtimeConfig": {"io.kubernetes.cri.pod-annotations": ann}}
codes = []
for command, stdin in (("VERSION", b'{"cniVersion": "0.4.0"}'), ("ADD", json.dumps(body).encode())):
    out = io.StringIO()
    codes.append(dispatch.run({**env, "CNI_COMMAND": command}, stdin, out, io.StringIO()))
    codes.append(json.loads(out.getvalue()).get("code", 0))
heavy = [m for m in ("pyroute2", "pydantic", "pydantic_core", "grpc", "prometheus_client",
                    "netaddr") if m in sys.modules]
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def test_version_and_pass_through_add_import_nothing_heavy(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE, str(metrics)], capture_output=True,
                          text=True, timeout=60, check=False,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"codes": [0, 0, 0, 0], "heavy": []}
    assert metrics.is_file()  # the ADD was counted, and that cost nothing heavy either


class _FullStdout(io.StringIO):
    """A stdout every write of which fails (``> /dev/full``)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("command", ["ADD", "BOGUS", "VERSION"])
def test_a_stdout_that_fails_is_raised_once_to_the_caller(command: str) -> None:
    """The answer is written once, outside the catch-all: a failing stdout is not taken
    for the command's failure, whose error document would fail to be written again."""
    out = _FullStdout()
    with pytest.raises(OSError, match="No space left"):
        dispatch.run({**ENV, "CNI_COMMAND": command}, json.dumps(conf()).encode(), out,
                     io.StringIO(), handlers=FakeHandlers())
    assert out.writes == 1


def test_an_unreadable_stdin_is_code_5_and_version_still_answers() -> None:
    out = io.StringIO()
    assert dispatch.unreadable({**ENV, "CNI_COMMAND": "DEL"}, out, "stdin is closed") == 1
    doc = only_doc(out.getvalue())
    assert doc == {"cniVersion": versions.LATEST, "code": 5,
                   "msg": "failed to read network config from stdin: stdin is closed"}
    out = io.StringIO()
    assert dispatch.unreadable({"CNI_COMMAND": "VERSION"}, out, "stdin is closed") == 0
    assert only_doc(out.getvalue())["supportedVersions"] == list(versions.SUPPORTED)
