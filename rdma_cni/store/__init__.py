"""The durable state store: ``state`` (the typed attachment state) and ``records``
(its per-interface entry), ``core`` (the Store: state records, quarantine, whole
keys), ``claims`` (address reservations and NIC claims), ``files`` (atomic writes,
temp files and orphans, bounded reads), ``lock`` (the flock), ``metrics_file``."""
