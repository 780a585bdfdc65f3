"""Trace ranges and the memory profiler, writing the same files as ridge's C++ code.

    ridge.bench.start_recording()
    with ridge.bench.trace_range("step"):      # or @ridge.bench.traced("step")
        ...                                    # ridge kernels called here nest inside
    ridge.bench.write("trace.json")            # Chrome trace JSON: Perfetto, chrome://tracing
"""
from __future__ import annotations

import contextlib
import functools
import json

from . import _ridge
from ._args import INT64_MAX, checked, string

_b = _ridge.bench
_U32 = {"colour": (0, 2**32 - 1)}
start_recording = checked(_b.start_recording, ranges={"max_events": (0, INT64_MAX)})
stop_recording, recording, clear = _b.stop_recording, _b.recording, _b.clear
event_count, dropped = _b.event_count, _b.dropped
write = checked(_b.write, paths=("path",))
set_thread_name, push, pop = checked(_b.set_thread_name), checked(_b.push), _b.pop
start_range, end_range, mark = checked(_b.start_range, ranges=_U32), checked(_b.end_range), checked(_b.mark, ranges=_U32)

__all__ = ["start_recording", "stop_recording", "recording", "clear", "event_count", "dropped", "write",
           "set_thread_name", "push", "pop", "start_range", "end_range", "mark", "trace_range", "traced",
           "to_dict", "memory"]


def to_dict() -> dict:
    """The Chrome trace-event document recorded so far."""
    return json.loads(_b.to_json())


@contextlib.contextmanager
def trace_range(name: str):
    """A push/pop range on the calling thread for the duration of the with-block."""
    push(string(name, "name"))
    try:
        yield
    finally:
        pop()


def traced(name=None):
    """Decorator: each call of the function is a range (named after the function by default)."""

    def wrap(fn):
        label = string(name, "name") if name is not None else fn.__qualname__

        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with trace_range(label):
                return fn(*args, **kwargs)

        return inner

    if callable(name):  # used bare: @traced
        fn, name = name, None
        return wrap(fn)
    if name is not None:
        string(name, "name")
    return wrap


class memory:
    """The memory profiler (allocations made through ridge's allocator: model buffers, workspaces)."""

    record_history = staticmethod(checked(_b.memory_record_history, ranges={"max_entries": (0, INT64_MAX)}))
    stop_recording = staticmethod(_b.memory_stop_recording)
    recording = staticmethod(_b.memory_recording)
    dump_snapshot = staticmethod(checked(_b.memory_dump_snapshot, paths=("path",)))
    current_bytes = staticmethod(_b.memory_current_bytes)
    peak_bytes = staticmethod(_b.memory_peak_bytes)
    reset_peak = staticmethod(_b.memory_reset_peak)

    @staticmethod
    def snapshot() -> dict:
        """The snapshot document dump_snapshot writes, as a dict (ridge memory show reads the file)."""
        return json.loads(_b.memory_snapshot())
