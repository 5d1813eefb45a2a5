"""Generated gRPC bindings for the kubelet APIs (regenerate with generate.sh).

- ``podresources_v1``: ``v1.PodResourcesLister`` (List, Get).
- ``deviceplugin_v1beta1``: ``v1beta1.Registration`` and ``v1beta1.DevicePlugin``.
"""
