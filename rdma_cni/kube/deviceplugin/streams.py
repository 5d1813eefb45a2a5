"""Which ``ListAndWatch`` streams the device plugin serves (each holds a worker thread).

A registration starts a generation: the streams of the one before end (they served the
kubelet before it, or anyone else). At most :data:`STREAMS` of one generation are open;
one more ends the oldest (woken at once, so its thread is freed), never the newcomer: a
process holding streams open must not keep the kubelet from its own. The kubelet's is
kept: at each registration the kubelet connects, asks ``GetDevicePluginOptions`` and
opens its stream, so the first stream after the first options call of a generation,
from a client of the same user agent (``grpc-go/...``), is kept, the ones opened after
it ending before it. (Nothing else tells the kubelet's stream: a process that asks for
the options first, or that opens streams between the kubelet's two calls with the
kubelet's user agent, can still end it.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("rdma_cni.kube.deviceplugin")
#: ListAndWatch streams of one registration served at once (the kubelet keeps one)
STREAMS = 4
#: seconds between two warnings that a stream was ended
WARN_EVERY = 60.0


@dataclass(eq=False)
class Stream:
    """One stream: its registration's generation, whether it is kept when streams are too
    many, and set when it is to end."""

    gen: int
    kept: bool
    ended: threading.Event = field(default_factory=threading.Event)


class Streams:
    """The open streams, by generation; ``wake`` wakes the streams waiting for a change."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._wake = wake
        self.generation = 0
        self._open: dict[int, list[Stream]] = {}  # generation -> its streams, oldest first
        self._ticket = False  # a registration waits for the kubelet's options call
        self._keep_next: str | None = None  # the next stream of this agent is kept
        self._warned = 0.0

    def new_generation(self) -> None:
        """Before a registration: the streams open so far end; they no longer count."""
        with self._lock:
            self.generation += 1
            self._ticket, self._keep_next = True, None

    def options_asked(self, agent: str) -> None:
        """``GetDevicePluginOptions`` was called by a client of user agent ``agent``: the
        first of a generation is the kubelet's, which opens its stream next."""
        with self._lock:
            if self._ticket:
                self._ticket, self._keep_next = False, agent

    def admit(self, agent: str) -> Stream:
        """A new stream of this generation, from a client of user agent ``agent``; the
        oldest not kept ends past :data:`STREAMS`."""
        with self._lock:
            stream = Stream(self.generation, agent == self._keep_next)
            if stream.kept:
                self._keep_next = None
            open_ = self._open.setdefault(stream.gen, [])
            victim = None
            if len(open_) >= STREAMS:
                victim = next((s for s in open_ if not s.kept), None)
                if victim is not None:
                    open_.remove(victim)
                    victim.ended.set()
            open_.append(stream)
        if victim is not None:
            self._ended_one()
        return stream

    def _ended_one(self) -> None:
        self._wake()
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY:  # a process reopening streams: one a minute
            self._warned = now
            log.warning("ending the oldest ListAndWatch stream: %d are open (is a process "
                        "other than the kubelet opening streams?)", STREAMS)

    def leave(self, stream: Stream) -> None:
        with self._lock:
            open_ = self._open.get(stream.gen, [])
            if stream in open_:
                open_.remove(stream)
            if not open_:
                self._open.pop(stream.gen, None)

    def ended(self, stream: Stream) -> bool:
        """Whether ``stream`` is to end: another took its place, or a registration came."""
        return stream.ended.is_set() or stream.gen != self.generation
