"""Config loading for the ``rdma-cni`` subcommands (doctor, ls, agent, install,
device-plugin, exporter).

``--config FILE`` is a JSON object shaped like the plugin's conflist entry. Without
it, the config is our entry (``"type": "rdma-cni"``) in the first CNI config file
of the conf dir, in the lexical order libcni and containerd use; the list's
``name`` and ``cniVersion`` are copied in, as libcni does when it runs the entry.
"""

from __future__ import annotations

import os
from typing import Any

from rdma_cni import defaults, jsondoc
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.errors import ConfigError
from rdma_cni.regfile import read_regular

PLUGIN_TYPE = "rdma-cni"
DEFAULT_CONF_DIR = defaults.CNI_CONF_DIR
CONF_EXTENSIONS = (".conf", ".conflist", ".json")
_MAX_FILE = 1 << 20


def read_json_object(path: str) -> dict[str, Any]:
    """The JSON object in ``path``; :class:`ConfigError` naming the file otherwise (a FIFO
    or a device there too, at once: symlinks are followed, but nothing waits)."""
    try:
        raw = read_regular(path, _MAX_FILE, follow=True)
    except OSError as e:  # NotRegularError's strerror: "a FIFO, not a regular file"
        raise ConfigError(f"failed to read config {path}: {e.strerror or e}") from e
    return parse_json_object(raw, path)


def parse_json_object(raw: bytes, path: str) -> dict[str, Any]:
    """The JSON object in ``raw``, read from ``path``; :class:`ConfigError` naming it."""
    try:
        doc: dict[str, Any] = jsondoc.decode(raw, _MAX_FILE, dict, "not a JSON object")
    except jsondoc.JsonRefused as e:
        raise ConfigError(f"failed to parse config {path}: {e}") from None
    return doc


def first_conf_file(conf_dir: str, any_link: bool = False) -> str | None:
    """The CNI config file the runtime uses: the first of the dir in lexical order, as
    libcni's ConfFiles lists it for containerd and CRI-O (a name with a CNI extension,
    one starting with a dot too).
    ``any_link``: a symlink counts whatever it points at (the caller resolves it; a
    container may not see an absolute target where the host does)."""
    try:
        names = sorted(os.listdir(conf_dir))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"failed to list CNI config dir {conf_dir}: {e.strerror or e}") from e
    for name in names:
        path = os.path.join(conf_dir, name)
        if not name.endswith(CONF_EXTENSIONS):  # a dot-file too, as libcni lists them
            continue
        if os.path.isfile(path) or (any_link and os.path.islink(path)):
            return path
    return None


def find_entry(conflist: dict[str, Any]) -> dict[str, Any] | None:
    """Our plugin entry of a parsed conflist, with the list's name and cniVersion."""
    plugins = conflist.get("plugins")
    if not isinstance(plugins, list):
        return None
    for p in plugins:
        if isinstance(p, dict) and p.get("type") == PLUGIN_TYPE:
            entry = dict(p)
            for k in ("name", "cniVersion"):
                if isinstance(conflist.get(k), str):
                    entry[k] = conflist[k]
            return entry
    return None


def load_config(path: str | None, conf_dir: str = DEFAULT_CONF_DIR) -> dict[str, Any]:
    """The ``--config`` file, else our entry in the first conflist of ``conf_dir``."""
    if path:
        return read_json_object(path)
    first = first_conf_file(conf_dir)
    if first is None:
        raise ConfigError(f"failed to find a CNI config in {conf_dir}: none there "
                          "(pass --config FILE or run `rdma-cni install`)")
    entry = find_entry(read_json_object(first))
    if entry is None:
        raise ConfigError(f"failed to find the {PLUGIN_TYPE} entry in {first}: not chained "
                          "(pass --config FILE or run `rdma-cni install`)")
    return entry


def load_netconf_for(
    path: str | None, conf_dir: str = DEFAULT_CONF_DIR
) -> tuple[Any, dict[str, Any]]:
    """(validated NetConf, raw entry): a --config file needs no name or cniVersion."""
    from rdma_cni.models.netconf import load_netconf

    raw = {"cniVersion": "1.0.0", "name": "rdma", **load_config(path, conf_dir)}
    return load_netconf(raw), raw


def data_dir_of(config: dict[str, Any]) -> str:
    value = config.get("dataDir") or DEFAULTS["dataDir"]
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise ConfigError("invalid config: dataDir must be an absolute path without a NUL "
                          "character")
    return value


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


#: (connect, read) seconds of every Kubernetes API call: a server that accepts and never
#: answers held the agent's pass for good (nothing lost was released after it)
API_TIMEOUT = (5.0, 15.0)


def core_v1_api() -> Any:
    """A ``kubernetes`` CoreV1Api with the in-cluster config (imported lazily)."""
    try:
        from kubernetes import client, config
    except ImportError as e:
        raise ConfigError(f"failed to load the kubernetes client: {e} "
                          "(pip install 'rdma-cni[k8s]')") from e
    config.load_incluster_config()
    return client.CoreV1Api()


def node_label(label: str, node: str | None = None) -> str | None:
    """The value of ``label`` on this node (``NODE_NAME``); None outside a cluster."""
    node = node or os.environ.get("NODE_NAME")
    if not node or not in_cluster():
        return None
    try:
        obj = core_v1_api().read_node(node, _request_timeout=API_TIMEOUT)
    except ConfigError:
        raise
    except Exception as e:  # the client raises ApiException, urllib3 and config errors
        raise ConfigError(f"failed to read node {node} from the Kubernetes API: {e}") from e
    labels = (obj.metadata.labels or {}) if obj.metadata else {}
    value = labels.get(label)
    return str(value) if value else None
