"""Per RDMA device and port: the kernel's counters, state, link layer and rate
from ``sys/class/infiniband/<dev>/ports/<p>`` (read through the Sysfs adapter).

Every file of ``counters/`` and ``hw_counters/`` that counts events (packets, errors,
discards, ...) is exported generically, by name, as it appears in sysfs: one unit per
metric name. ``port_rcv_data``/``port_xmit_data`` count 4-octet words (IBTA), another
unit: they are exported only as bytes, ``rdma_port_{receive,transmit}_bytes_total`` (x 4).
``hw_counters/`` of other drivers than mlx5 mixes units, so its files are sorted by name:
byte counts (``rx_bytes``, irdma's ``ip4RxOcts``) are ``rdma_port_hw_bytes_total``, object
counts that go up and down (bnxt_re's ``active_qps``, ``watermark_qps``) the gauge
``rdma_port_hw_objects``, the rest (events) ``rdma_port_hw_counter_total``.
``hw_counters/lifespan`` is a setting (ms), not a counter: skipped.
The rate is exported in bytes per second (base units, as node_exporter does).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.node.discovery import IB, discover

PORT_STATES = ("NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER")
_NOT_COUNTERS = {"lifespan"}
#: counters in 4-octet words: only in bytes, under their own names (_WELL_KNOWN)
_WORDS = {"port_rcv_data", "port_xmit_data"}
_WELL_KNOWN = {  # sysfs counter -> (own metric name, multiplier, help)
    "port_rcv_data": ("rdma_port_receive_bytes_total", 4, "Bytes received (port_rcv_data x 4)"),
    "port_xmit_data": ("rdma_port_transmit_bytes_total", 4,
                       "Bytes transmitted (port_xmit_data x 4)"),
    "port_rcv_packets": ("rdma_port_receive_packets_total", 1, "Packets received"),
    "port_xmit_packets": ("rdma_port_transmit_packets_total", 1, "Packets transmitted"),
}
#: hw_counters names by unit (module docstring); the rest count events
_HW_BYTES = re.compile(r"bytes|octets|octs", re.IGNORECASE)
_HW_OBJECTS = re.compile(r"^(active|watermark)_|_watermark$", re.IGNORECASE)
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)b/sec", re.IGNORECASE)
_UNIT = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_rate(text: str | None) -> float | None:
    """``"100 Gb/sec (4X EDR)"`` -> 1e11 bits per second; None when unparsable."""
    m = _RATE_RE.match(text or "")
    if not m:
        return None
    return float(m.group(1)) * _UNIT[m.group(2).upper()]


def parse_state(text: str | None) -> str | None:
    """``"4: ACTIVE"`` -> ``"ACTIVE"`` (also ``"5: LinkUp"`` -> ``"LinkUp"``)."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip() or None


def read_counters(sysfs: Sysfs, rel_dir: str) -> dict[str, int]:
    """Integer values of the files in ``rel_dir``; unreadable or non-numeric skipped."""
    out: dict[str, int] = {}
    for name in sysfs.listdir(rel_dir):
        raw = sysfs.read(f"{rel_dir}/{name}")
        if raw is not None and raw.isdigit() and name not in _NOT_COUNTERS:
            out[name] = int(raw)
    return out


class _Families:
    def __init__(self) -> None:
        lab = ["device", "port"]
        self.counter = CounterMetricFamily(
            "rdma_port_counter", "RDMA port event counter from sysfs ports/<p>/counters "
            "(packets, errors, discards; the data counters are rdma_port_*_bytes_total)",
            labels=[*lab, "counter"])
        self.hw = CounterMetricFamily(
            "rdma_port_hw_counter", "RDMA port hardware event counter from sysfs "
            "ports/<p>/hw_counters (bytes and object counts have their own names)",
            labels=[*lab, "counter"])
        self.hw_bytes = CounterMetricFamily(
            "rdma_port_hw_bytes", "RDMA port hardware byte counter from sysfs "
            "ports/<p>/hw_counters (names with bytes or octets)", labels=[*lab, "counter"])
        self.hw_objects = GaugeMetricFamily(
            "rdma_port_hw_objects", "RDMA port hardware objects in use or their high-water "
            "mark from sysfs ports/<p>/hw_counters (active_*, watermark_*)",
            labels=[*lab, "counter"])
        self.known = {k: CounterMetricFamily(n[:-6], h, labels=lab)
                      for k, (n, _, h) in _WELL_KNOWN.items()}
        self.state = GaugeMetricFamily("rdma_port_state", "1 for the port's current logical "
                                       "state (ports/<p>/state)", labels=[*lab, "state"])
        self.phys = GaugeMetricFamily("rdma_port_phys_state", "1 for the port's current "
                                      "physical state (ports/<p>/phys_state)",
                                      labels=[*lab, "state"])
        self.info = GaugeMetricFamily("rdma_port_info", "RDMA port: link layer and the host "
                                      "netdev (empty if none)",
                                      labels=[*lab, "link_layer", "netdev"])
        self.rate = GaugeMetricFamily("rdma_port_speed_bytes_per_second", "Port rate "
                                      "(ports/<p>/rate) in bytes per second", labels=lab)

    def all(self) -> list[Metric]:
        return [self.counter, self.hw, self.hw_bytes, self.hw_objects, *self.known.values(),
                self.state, self.phys, self.info, self.rate]

    def hw_family(self, name: str) -> CounterMetricFamily | GaugeMetricFamily:
        """The family of one ``hw_counters/`` file, by its unit (module docstring)."""
        if _HW_OBJECTS.search(name):
            return self.hw_objects
        return self.hw_bytes if _HW_BYTES.search(name) else self.hw


class RdmaPortCollector:
    name = "rdma_ports"

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs

    def collect(self) -> Iterator[Metric]:
        fam = _Families()
        netdevs = {(n.ibdev, n.port): n.netdev for n in discover(self.sysfs) if n.ibdev}
        for dev in self.sysfs.listdir(IB):
            for port in self.sysfs.listdir(f"{IB}/{dev}/ports"):
                if port.isdigit():
                    self._port(fam, dev, port, netdevs.get((dev, int(port)), ""))
        yield from fam.all()

    def _port(self, fam: _Families, dev: str, port: str, netdev: str) -> None:
        base = f"{IB}/{dev}/ports/{port}"
        lab = [dev, port]
        for name, value in read_counters(self.sysfs, f"{base}/counters").items():
            if name not in _WORDS:
                fam.counter.add_metric([*lab, name], value)
            if name in _WELL_KNOWN:
                fam.known[name].add_metric(lab, value * _WELL_KNOWN[name][1])
        for name, value in read_counters(self.sysfs, f"{base}/hw_counters").items():
            fam.hw_family(name).add_metric([*lab, name], value)
        state = parse_state(self.sysfs.read(f"{base}/state"))
        if state is not None:
            for s in dict.fromkeys((*PORT_STATES, state)):
                fam.state.add_metric([*lab, s], 1.0 if s == state else 0.0)
        phys = parse_state(self.sysfs.read(f"{base}/phys_state"))
        if phys is not None:
            fam.phys.add_metric([*lab, phys], 1.0)
        link = self.sysfs.read(f"{base}/link_layer") or ""
        fam.info.add_metric([*lab, link, netdev], 1.0)
        rate = parse_rate(self.sysfs.read(f"{base}/rate"))
        if rate is not None:
            fam.rate.add_metric(lab, rate / 8)  # base units: bytes, as node_exporter
