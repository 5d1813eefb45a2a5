"""The ClusterRole grants exactly the API calls the code makes: every ``kubernetes`` client
method the package refers to is mapped (through the client's own request definition:
HTTP method and resource path) to an RBAC (apiGroup, resource, verb); a verb granted that
nothing calls fails, and so does a call the role does not grant. No root."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from functools import cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: k8srender
import k8srender as k8s

client = pytest.importorskip("kubernetes.client")
PACKAGE = k8s.REPO / "rdma_cni"
Grant = tuple[str, str, str]  # (apiGroup, resource, verb)
_NEW = re.compile(r"method='([A-Z]+)',\s*resource_path='([^']+)'")  # client >= 29
_OLD = re.compile(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'")  # older clients


def api_classes(root: Path = PACKAGE) -> set[str]:
    """The client's ``*Api`` classes the package makes (``client.CoreV1Api()``)."""
    names = {n for n in dir(client) if n.endswith("Api") and inspect.isclass(getattr(client, n))}
    return {node.attr for py in sorted(root.rglob("*.py"))
            for node in ast.walk(ast.parse(py.read_text(), str(py)))
            if isinstance(node, ast.Attribute) and node.attr in names}


@cache
def api_methods(classes: frozenset[str] = frozenset({"CoreV1Api"})) -> dict[str, tuple[str, str]]:
    """Public method of the client's ``classes`` -> (HTTP method, resource path)."""
    out: dict[str, tuple[str, str]] = {}
    for cls_name in sorted(classes):
        cls = getattr(client, cls_name)
        for name in dir(cls):
            if name.startswith("_") or name.endswith("_with_http_info"):
                continue
            sources = [getattr(cls, f"_{name}_serialize", None),
                       getattr(cls, f"{name}_with_http_info", None)]
            text = "".join(inspect.getsource(s) for s in sources if s is not None)
            if (m := _NEW.search(text)) is not None:
                out[name] = (m.group(1), m.group(2))
            elif (m := _OLD.search(text)) is not None:
                out[name] = (m.group(2), m.group(1))
    return out


def rbac(http: str, path: str) -> Grant:
    """(apiGroup, resource, verb) of one request, as the API server authorizes it."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]  # namespaced: namespaces/{namespace}/<resource>/...
    resource = rest[0] + ("/" + rest[2] if len(rest) > 2 else "")  # subresource
    named = len(rest) > 1
    verb = {"GET": "get" if named else "list", "POST": "create", "PATCH": "patch",
            "PUT": "update", "DELETE": "delete" if named else "deletecollection"}[http]
    return group, resource, verb


def calls(root: Path = PACKAGE) -> dict[Grant, set[str]]:
    """Every grant the package's code needs -> where (module:method) it is needed."""
    methods = api_methods(frozenset(api_classes(root)))
    out: dict[Grant, set[str]] = {}
    for py in sorted(root.rglob("*.py")):
        if py.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        for node in ast.walk(ast.parse(py.read_text(), str(py))):
            if isinstance(node, ast.Attribute) and node.attr in methods:
                grant = rbac(*methods[node.attr])
                out.setdefault(grant, set()).add(f"{py.relative_to(root)}:{node.attr}")
            if isinstance(node, ast.keyword) and node.arg == "watch":
                raise AssertionError(f"{py}: a watch call: map it to the watch verb here")
    return out


def granted(docs: list[dict[str, object]]) -> set[Grant]:
    role = k8s.one(docs, "ClusterRole")
    return {(group, resource, verb) for rule in role["rules"]  # type: ignore[attr-defined]
            for group in rule["apiGroups"] for resource in rule["resources"]
            for verb in rule["verbs"]}


def test_the_mapping_of_client_methods_to_rbac() -> None:
    m = api_methods()
    assert rbac(*m["read_node"]) == ("", "nodes", "get")
    assert rbac(*m["list_pod_for_all_namespaces"]) == ("", "pods", "list")
    assert rbac(*m["list_namespaced_pod"]) == ("", "pods", "list")
    assert rbac(*m["patch_namespaced_pod"]) == ("", "pods", "patch")
    assert rbac(*m["read_namespaced_pod_status"]) == ("", "pods/status", "get")
    assert rbac(*m["create_namespaced_event"]) == ("", "events", "create")
    assert rbac(*m["delete_collection_namespaced_pod"]) == ("", "pods", "deletecollection")


def test_the_scan_finds_the_calls_of_the_code() -> None:
    assert api_classes() == {"CoreV1Api"}
    found = calls()
    where = {w for ws in found.values() for w in ws}
    assert "models/subconfig.py:read_node" in where
    assert "kube/agent/kubeapi.py:patch_namespaced_pod" in where


@pytest.mark.parametrize("target", sorted(k8s.TARGETS))
def test_the_role_grants_exactly_what_the_code_calls(target: str) -> None:
    needed = calls()
    have = granted(k8s.render(k8s.TARGETS[target]))
    assert not set(needed) - have, {g: needed[g] for g in set(needed) - have}
    assert not have - set(needed), f"granted, called nowhere: {sorted(have - set(needed))}"


def test_the_binding_names_the_daemonsets_service_account() -> None:
    docs = k8s.render(k8s.BASE)
    (subject,) = k8s.one(docs, "ClusterRoleBinding")["subjects"]
    account = k8s.one(docs, "ServiceAccount")["metadata"]
    assert (subject["name"], subject["namespace"]) == (account["name"], account["namespace"])
    assert k8s.pod_spec(docs)["serviceAccountName"] == account["name"]
