"""The durable state store: attachment state, records, locks, counters."""
