"""CNI_ARGS: K=V;K=V, IgnoreUnknown honoured, the Kubernetes keys typed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdma_cni.errors import CniError, EnvError
from rdma_cni.models.cniargs import MAX_LEN, CniArgs, parse_cni_args

K8S = ("K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=trainer-0;"
       "K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=5b1c-uid")


def test_kubernetes_keys_are_typed() -> None:
    args = parse_cni_args("IgnoreUnknown=1;" + K8S)
    assert args == CniArgs(pod_namespace="kube-system", pod_name="trainer-0",
                           infra_container_id="c0ffee", pod_uid="5b1c-uid",
                           ignore_unknown=True, extra={})
    assert args.pod == "kube-system/trainer-0"


def test_empty_args() -> None:
    assert parse_cni_args("") == CniArgs()
    assert parse_cni_args(";;") == CniArgs()
    assert CniArgs().pod == ""


def test_known_keys_need_no_ignore_unknown() -> None:
    assert parse_cni_args(K8S).pod_uid == "5b1c-uid"


@pytest.mark.parametrize("flag", ["1", "true", "TRUE", "True", "t"])
def test_ignore_unknown_keeps_unknown_keys_aside(flag: str) -> None:
    args = parse_cni_args(f"IgnoreUnknown={flag};FOO=bar;K8S_POD_NAME=p;X=")
    assert args.ignore_unknown
    assert args.extra == {"FOO": "bar", "X": ""}
    assert args.pod_name == "p"


@pytest.mark.parametrize("raw", ["FOO=bar", "IgnoreUnknown=0;FOO=bar",
                                 "IgnoreUnknown=false;FOO=bar", "K8S_POD_NAME=p;FOO=bar"])
def test_unknown_keys_without_ignore_unknown_are_code_4(raw: str) -> None:
    with pytest.raises(EnvError, match="FOO") as info:
        parse_cni_args(raw)
    assert info.value.code == 4


@pytest.mark.parametrize("raw", ["IgnoreUnknown=yes", "IgnoreUnknown=2", "novalue", "=x",
                                 "K8S_POD_NAME", "a=b\nc=d", "a=b\x00", "x" * (MAX_LEN + 1)])
def test_malformed_args_are_code_4(raw: str) -> None:
    with pytest.raises(EnvError, match="CNI_ARGS"):
        parse_cni_args(raw)


def test_value_may_contain_equals_and_last_key_wins() -> None:
    args = parse_cni_args("K8S_POD_NAME=a;K8S_POD_NAME=b=c")
    assert args.pod_name == "b=c"


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_only_cni_errors(raw: str) -> None:
    try:
        args = parse_cni_args(raw)
    except CniError as exc:
        assert exc.code == 4 and "CNI_ARGS" in exc.msg
        return
    assert isinstance(args, CniArgs)


KEY = st.sampled_from(["K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_UID",
                       "K8S_POD_INFRA_CONTAINER_ID", "FOO", "bar"])
VALUE = st.text(st.characters(blacklist_characters=";\n\x00", blacklist_categories=["Cs"]),
                max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEY, VALUE, max_size=6))
def test_fuzz_round_trip_with_ignore_unknown(pairs: dict[str, str]) -> None:
    raw = ";".join(["IgnoreUnknown=1", *(f"{k}={v}" for k, v in pairs.items())])
    args = parse_cni_args(raw)
    assert args.pod_name == pairs.get("K8S_POD_NAME", "")
    assert args.pod_namespace == pairs.get("K8S_POD_NAMESPACE", "")
    assert args.pod_uid == pairs.get("K8S_POD_UID", "")
    assert args.infra_container_id == pairs.get("K8S_POD_INFRA_CONTAINER_ID", "")
    assert args.extra == {k: v for k, v in pairs.items() if not k.startswith("K8S_")}
