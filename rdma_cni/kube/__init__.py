"""The Kubernetes halves: device plugin, agent, exporter."""
