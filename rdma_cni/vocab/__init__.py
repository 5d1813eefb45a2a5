"""The vocabulary every layer shares: the attachment key (:mod:`.attachment`), the
planner's records (:mod:`.plan`), the netlink records (:mod:`.netlink`) and port
protocols (:mod:`.ports`), the NIC facts (:mod:`.nic`), the name rules (:mod:`.names`),
the table of modes (:mod:`.modes`) and the kinds and statuses (:mod:`.kinds`).

It imports only the standard library and the base modules :mod:`rdma_cni.errors` and
:mod:`rdma_cni.defaults`, so any layer may import it (docs/architecture.md, "Layers";
``tests/unit/test_layers.py`` checks it)."""
