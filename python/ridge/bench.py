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

_b = _ridge.bench
start_recording, stop_recording, recording, clear = _b.start_recording, _b.stop_recording, _b.recording, _b.clear
event_count, dropped, write, set_thread_name = _b.event_count, _b.dropped, _b.write, _b.set_thread_name
push, pop, start_range, end_range, mark = _b.push, _b.pop, _b.start_range, _b.end_range, _b.mark

__all__ = ["start_recording", "stop_recording", "recording", "clear", "event_count", "dropped", "write",
           "set_thread_name", "push", "pop", "start_range", "end_range", "mark", "trace_range", "traced",
           "to_dict", "memory"]


def to_dict() -> dict:
    """The Chrome trace-event document recorded so far."""
    return json.loads(_b.to_json())


@contextlib.contextmanager
def trace_range(name: str):
    """A push/pop range on the calling thread for the duration of the with-block."""
    push(name)
    try:
        yield
    finally:
        pop()


def traced(name=None):
    """Decorator: each call of the function is a range (named after the function by default)."""

    def wrap(fn):
        label = name or fn.__qualname__

        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with trace_range(label):
                return fn(*args, **kwargs)

        return inner

    if callable(name):  # used bare: @traced
        fn, name = name, None
        return wrap(fn)
    return wrap


class memory:
    """The memory profiler (allocations made through ridge's allocator: model buffers, workspaces)."""

    record_history = staticmethod(_b.memory_record_history)
    stop_recording = staticmethod(_b.memory_stop_recording)
    recording = staticmethod(_b.memory_recording)
    dump_snapshot = staticmethod(_b.memory_dump_snapshot)
    current_bytes = staticmethod(_b.memory_current_bytes)
    peak_bytes = staticmethod(_b.memory_peak_bytes)
    reset_peak = staticmethod(_b.memory_reset_peak)

    @staticmethod
    def snapshot() -> dict:
        """The snapshot document dump_snapshot writes, as a dict (ridge memory show reads the file)."""
        return json.loads(_b.memory_snapshot())
