"""The low-level defaults every layer shares (DESIGN §8): paths and numbers only.

Stdlib-free and import-free, so the pass-through path, DEL and the models can all read
it without pulling in the modules that use the values.
"""

#: the plugin's log file (``logFile``)
LOG_FILE = "/var/log/rdma-cni.log"
#: the store's data dir (``dataDir``)
DATA_DIR = "/var/lib/cni/rdma-cni"
#: the directory of the node's runtime files (the DaemonSet creates it)
RUN_DIR = "/run/rdma-cni"
#: the resident server's socket (``residentSocket``)
RESIDENT_SOCKET = f"{RUN_DIR}/rdma-cni.sock"
#: the plugin's operation counters (``metricsFile``)
METRICS_FILE = f"{RUN_DIR}/metrics"
#: the device plugin's registration status file
DEVICE_PLUGIN_STATUS = f"{RUN_DIR}/device-plugin.json"
#: the agent's status file
AGENT_STATUS = f"{RUN_DIR}/agent-status.json"
#: what the DaemonSet's pod started with (``install --write-config``'s record)
CONFIG_RECORD = f"{RUN_DIR}/config-source.json"
#: the node label that names the node's RDMA mode
MODE_LABEL = "vke.node.rdma.mode"
#: the kubelet's PodResources socket and device-plugin checkpoint (``kubelet`` keys)
KUBELET_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
KUBELET_CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
#: the node's CNI config dir
CNI_CONF_DIR = "/etc/cni/net.d"
#: the first policy-routing rule priority of a pod's RDMA interfaces (``rulePriority``)
RULE_PRIORITY = 20000
#: the network instance name of our blocks (``cniConfName``)
CNI_CONF_NAME = "rdma"
#: the exporter's port
EXPORTER_PORT = 9469
#: where ``install`` puts nccl_env.sh on the host
NCCL_ENV_HOST_PATH = "/opt/cni/bin/nccl_env.sh"
#: the kubelet's root dir (its --root-dir)
KUBELET_DIR = "/var/lib/kubelet"


def kubelet_paths(root: str = KUBELET_DIR) -> dict[str, str]:
    """The ``kubelet`` config keys of a kubelet whose root dir is ``root``."""
    return {"podResourcesSocket": f"{root}/pod-resources/kubelet.sock",
            "checkpointFile": f"{root}/device-plugins/kubelet_internal_checkpoint",
            "devicePluginDir": f"{root}/device-plugins"}
