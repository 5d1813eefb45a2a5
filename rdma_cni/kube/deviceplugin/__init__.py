"""The RDMA device plugin (``rdma-cni device-plugin``), kubelet API v1beta1.

- ``devices``: pure logic (device list per mode, preferred allocation, Allocate).
- ``inventory``: NICs and health from sysfs, versioned device list.
- ``server``: gRPC servicer, registration, the poll loop.
- ``cli``: ``main(argv)``.
"""
