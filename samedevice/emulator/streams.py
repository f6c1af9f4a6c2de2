"""6. Streams and events: what torch.cuda offers (torch/cuda/streams.py, torch/cuda/__init__.py), host-synchronous.

Library code takes a device path whenever the PrivateUse1 module says it is available: DCP's file writer,
for one, overlaps its device-to-host copies on `torch.<backend>.current_stream()` and
`torch.<backend>.stream(...)` (torch/distributed/checkpoint/filesystem.py, _OverlappingCpuLoader), even for
a CPU-only state dict. So `torch.emulated` has CUDA's stream interface. The stream ids, the current stream
(per host thread and device) and the events' clock live in the C++ guard (guard.cpp), so `torch.emulated`,
`torch.Stream`/`torch.Event` and `torch.accelerator`'s stream functions agree. Every op on the emulated device
has finished when it returns, so waiting and synchronizing have nothing to wait for, `query()` is always
True, and `elapsed_time` is the host time between two records.
"""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator import registration
from samedevice.emulator.registration import NAME

PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as torch.Stream's device_type gives it


class Stream(torch.Stream):
    """torch.cuda.Stream's interface: `Stream(device=None, priority=0)`, or from its three ids."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs and "device_index" in kwargs:
            return super().__new__(cls, priority=priority, **kwargs)
        index = registration.index_of(device)
        registration.check_present(index)
        return super().__new__(cls, torch.device(NAME, index), priority=priority)


class Event(torch.Event):
    """torch.cuda.Event's interface: `Event(enable_timing=False, blocking=False, interprocess=False)`; like a
    CUDA event it takes its device from the stream it is first recorded on."""

    timing: bool

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Event:
        event = super().__new__(cls, torch.device(NAME), enable_timing=enable_timing, blocking=blocking,
                                interprocess=interprocess)
        event.timing = enable_timing
        return event

    def elapsed_time(self, end_event: torch.Event) -> float:
        # PyTorch's binding takes only an exact torch.Event as `end_event`: for another torch.emulated.Event the
        # guard answers by handle, with InlineEvent's checks (the device type here; timing and recording there)
        if type(end_event) is torch.Event:
            return super().elapsed_time(end_event)
        if end_event.device.type != self.device.type:
            raise RuntimeError(f"Event device type {self.device.type.upper()} does not match other's device type "
                               f"{end_event.device.type.upper()}.")
        if not (self.timing and getattr(end_event, "timing", True)):  # checked first, as InlineEvent does
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        from samedevice.emulator import guard

        return guard.elapsed_time(self.event_id, end_event.event_id)


def _as_stream(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


def current_stream(device: Any = None) -> Stream:
    """The current stream of `device` (default: the current device), as torch.cuda.current_stream."""
    index = registration.index_of(device)
    return _as_stream(torch.accelerator.current_stream(torch.device(NAME, index)))


def default_stream(device: Any = None) -> Stream:
    """The default stream of `device` (stream id 0, as CUDA's null stream)."""
    index = registration.index_of(device)
    return Stream(stream_id=0, device_index=index, device_type=PRIVATEUSE1)


def set_stream(stream: torch.Stream | None) -> None:
    """Make `stream` current; like torch.cuda.set_stream it also makes its device current. None: a no-op."""
    if stream is None:
        return
    torch.accelerator.set_stream(stream)


class StreamContext:
    """`with torch.emulated.stream(s):` as torch.cuda.StreamContext: inside, `s` and its device are current;
    after, the previous streams of both devices and the previous device come back. None: a no-op."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.src_prev: Stream | None = None
        self.dst_prev: Stream | None = None

    def __enter__(self) -> None:
        if self.stream is None:
            return
        self.src_prev = current_stream()
        if self.src_prev.device != self.stream.device:
            self.dst_prev = current_stream(self.stream.device)
        set_stream(self.stream)

    def __exit__(self, *exc: object) -> None:
        if self.stream is None:
            return
        if self.dst_prev is not None:
            set_stream(self.dst_prev)
        set_stream(self.src_prev)


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


def register() -> None:
    """Give the device module (torch.emulated) the stream interface."""
    module = registration._DeviceModule
    module.Stream = Stream  # type: ignore[attr-defined]
    module.Event = Event  # type: ignore[attr-defined]
    module.StreamContext = StreamContext  # type: ignore[attr-defined]
    for fn in (current_stream, default_stream, set_stream, stream):
        setattr(module, fn.__name__, staticmethod(fn))
