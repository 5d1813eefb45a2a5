"""The durable state store: ``state`` (the typed attachment state) and ``records``
(its per-interface entry), ``core`` (the Store: state records, quarantine, whole
keys), ``claims`` (address reservations), ``nics`` (NIC claims), ``atomic`` (atomic
writes and temp files), ``orphans`` (temp files a dead writer left), ``files`` (bounded
reads, scans), ``lock`` (the flock), ``metrics_file``."""
