"""Which ``ListAndWatch`` streams the device plugin serves (each holds a worker thread).

A registration starts a generation: the streams of the one before end (they served the
kubelet before it, or anyone else). At most :data:`STREAMS` of one generation are open;
one more ends the oldest (woken at once, so its thread is freed), never the newcomer: a
process holding streams open must not keep the kubelet from its own, which it opens
right after Register. The first stream opened after a registration, the kubelet's as
it comes, is kept: the ones opened after it end before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("rdma_cni.kube.deviceplugin")
#: ListAndWatch streams of one registration served at once (the kubelet keeps one)
STREAMS = 4


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
        self._first_after_register = False

    def new_generation(self) -> None:
        """Before a registration: the streams open so far end; they no longer count."""
        with self._lock:
            self.generation += 1

    def registered(self) -> None:
        """After a registration: the next stream opened is the kubelet's, kept."""
        with self._lock:
            self._first_after_register = True

    def admit(self) -> Stream:
        """A new stream of this generation; the oldest not kept ends past :data:`STREAMS`."""
        with self._lock:
            stream = Stream(self.generation, self._first_after_register)
            self._first_after_register = False
            open_ = self._open.setdefault(stream.gen, [])
            victim = None
            if len(open_) >= STREAMS:
                victim = next((s for s in open_ if not s.kept), None)
                if victim is not None:
                    open_.remove(victim)
                    victim.ended.set()
            open_.append(stream)
        if victim is not None:
            log.warning("ending the oldest ListAndWatch stream: %d are open", STREAMS)
            self._wake()
        return stream

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
