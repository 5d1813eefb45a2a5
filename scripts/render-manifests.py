#!/usr/bin/env python3
"""Render conf/k8s/ for a cluster from a values file (defaults: conf/k8s-values.yaml).

    python3 scripts/render-manifests.py --values my-values.yaml --out rendered/

The YAML files under conf/k8s/ are the manifests rendered with the defaults; this
script reads them and rewrites, structurally, every place a value lives:

- ``namespace``: ``metadata.namespace`` of each namespaced object, the namespace of
  each binding's ServiceAccount subject, a ServiceMonitor's ``namespaceSelector``, and
  ``kubectl -n NAMESPACE`` in the alert rules' texts;
- ``image``: the image of every (init) container of a pod template;
- ``kubeletDir``, ``cniBinDir``, ``cniConfDir``: the ``hostPath`` volumes under those
  host dirs, and container arguments that name a host path under ``cniBinDir`` (the
  ``nccl_env.sh`` the device plugin hands to the kubelet).

Paths inside the containers do not change. A shipped manifest that disagrees with
the defaults (an image other than the default one) is an error, so the defaults file
stays the one place. Needs PyYAML. Errors: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "conf" / "k8s"
DEFAULTS = REPO / "conf" / "k8s-values.yaml"
PATH_KEYS = ("kubeletDir", "cniBinDir", "cniConfDir")
KEYS = ("namespace", "image", *PATH_KEYS)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class RenderError(Exception):
    pass


def load_values(path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the defaults) updated with the file's keys, each validated."""
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        detail = " ".join(str(e).split())  # one line
        raise RenderError(f"cannot read values file {path}: {detail}") from e
    if not isinstance(doc, dict):
        raise RenderError(f"values file {path}: expected a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise RenderError(f"values file {path}: unknown key {unknown[0]!r} "
                          f"(known: {', '.join(KEYS)})")
    values = dict(base or {})
    for key, value in doc.items():
        if not isinstance(value, str) or not value:
            raise RenderError(f"values file {path}: {key} must be a non-empty string")
        if key in PATH_KEYS and (not value.startswith("/") or value != os.path.normpath(value)):
            raise RenderError(f"values file {path}: {key} {value!r} must be a normalised "
                              "absolute path")
        if key == "namespace" and not _DNS_LABEL.match(value):
            raise RenderError(f"values file {path}: namespace {value!r} is not a DNS label")
        values[key] = value
    missing = [k for k in KEYS if k not in values]
    if missing:
        raise RenderError(f"values file {path}: missing {', '.join(missing)}")
    return values


def move_path(path: str, defaults: dict[str, str], values: dict[str, str]) -> str:
    """A host path under one of the default dirs, moved under the chosen one."""
    for key in PATH_KEYS:
        old = defaults[key]
        if path == old or path.startswith(old + "/"):
            return values[key] + path[len(old):]
    return path


def _pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec") or {}
    template = (spec.get("template") or {}).get("spec")
    return [template] if isinstance(template, dict) else []


def _render_pod(pod: dict[str, Any], defaults: dict[str, str], values: dict[str, str],
                where: str) -> None:
    for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        if c.get("image") != defaults["image"]:
            raise RenderError(f"{where}: container {c.get('name')} has image "
                              f"{c.get('image')!r}, not the default {defaults['image']!r} "
                              f"of {DEFAULTS.name}")
        c["image"] = values["image"]
        for key in ("command", "args"):
            if key in c:
                c[key] = [move_bin_arg(a, defaults, values) for a in c[key]]
    for v in pod.get("volumes", []):
        if "hostPath" in v:
            v["hostPath"]["path"] = move_path(v["hostPath"]["path"], defaults, values)


def move_bin_arg(arg: Any, defaults: dict[str, str], values: dict[str, str]) -> Any:
    old = defaults["cniBinDir"]
    if isinstance(arg, str) and arg.startswith(old + "/"):
        return values["cniBinDir"] + arg[len(old):]
    return arg


def render_doc(doc: dict[str, Any], defaults: dict[str, str], values: dict[str, str],
               where: str = "manifest") -> dict[str, Any]:
    """One object rendered with ``values``; pure."""
    out = copy.deepcopy(doc)

    def ns(name: str) -> str:
        return values["namespace"] if name == defaults["namespace"] else name

    meta = out.get("metadata") or {}
    if "namespace" in meta:
        meta["namespace"] = ns(meta["namespace"])
    for subject in out.get("subjects") or []:
        if "namespace" in subject:
            subject["namespace"] = ns(subject["namespace"])
    selector = (out.get("spec") or {}).get("namespaceSelector") or {}
    if "matchNames" in selector:
        selector["matchNames"] = [ns(n) for n in selector["matchNames"]]
    for pod in _pod_specs(out):
        _render_pod(pod, defaults, values, where)
    for group in (out.get("spec") or {}).get("groups") or []:  # alert texts: kubectl -n NS
        for rule in group.get("rules") or []:
            notes = rule.get("annotations") or {}
            for key, text in notes.items():
                notes[key] = text.replace(f"-n {defaults['namespace']} ",
                                          f"-n {values['namespace']} ")
    return out


def shipped() -> dict[str, list[dict[str, Any]]]:
    """The manifests as shipped, per file name."""
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
            for p in sorted(MANIFESTS.glob("*.yaml"))}


def render(values: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    defaults = load_values(DEFAULTS)
    return {name: [render_doc(d, defaults, values, name) for d in docs]
            for name, docs in shipped().items()}


def write(rendered: dict[str, list[dict[str, Any]]], out: Path, source: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, docs in rendered.items():
        body = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)
        (out / name).write_text(f"# rendered from conf/k8s/{name} with {source} by "
                                f"scripts/render-manifests.py\n{body}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="render-manifests.py", description=__doc__.split("\n")[0])
    p.add_argument("--values", type=Path, default=DEFAULTS,
                   help=f"values file (default: {DEFAULTS.relative_to(REPO)})")
    p.add_argument("--out", type=Path, required=True, help="directory to write the manifests to")
    args = p.parse_args(argv)
    try:
        values = load_values(args.values, load_values(DEFAULTS))
        rendered = render(values)
        write(rendered, args.out, args.values)
    except RenderError as e:
        print(f"render-manifests: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"render-manifests: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"render-manifests: wrote {len(rendered)} files to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
