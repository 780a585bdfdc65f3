"""Trace ranges and the memory profiler, writing the same files as ridge's C++ code (type stubs)."""
from typing import Any, Callable, ContextManager, Dict, List, Optional, TypeVar, Union, overload

__all__: List[str]

_F = TypeVar("_F", bound=Callable[..., Any])

class _Handle:
    """A start/end range in flight (start_range returns it, end_range closes it)."""
    @property
    def name(self) -> str: ...

def start_recording(max_events: int = 0) -> None:
    """Starts recording trace events (clearing earlier ones); max_events caps memory (0: no cap)."""
def stop_recording() -> None:
    """Stops recording; the events stay until clear() or the next start_recording()."""
def recording() -> bool:
    """Whether trace events are being recorded."""
def clear() -> None:
    """Drops the recorded events."""
def event_count() -> int:
    """Recorded events (thread-name metadata excluded)."""
def dropped() -> int:
    """Events dropped because max_events was reached (never silently)."""
def write(path: str) -> None:
    """Writes the Chrome trace JSON (Perfetto, chrome://tracing) to `path`."""
def set_thread_name(name: str) -> None:
    """Names the calling thread in the trace (and in NVTX)."""
def push(name: str) -> None:
    """Opens a range on the calling thread (closed by pop)."""
def pop() -> None:
    """Closes the calling thread's innermost range."""
def start_range(name: str, colour: int = 0) -> _Handle:
    """Opens a range that any thread may close with end_range."""
def end_range(handle: _Handle) -> None:
    """Closes a range opened by start_range."""
def mark(name: str, category: str = "", colour: int = 0, payload: Optional[float] = None) -> None:
    """An instant marker, with an optional category, colour (0xAARRGGBB) and numeric payload."""
def trace_range(name: str) -> ContextManager[None]:
    """A push/pop range on the calling thread for the duration of the with-block."""
@overload
def traced(name: _F) -> _F: ...
@overload
def traced(name: Optional[str] = None) -> Callable[[_F], _F]: ...
def to_dict() -> Dict[str, Any]:
    """The Chrome trace-event document recorded so far."""

class memory:
    """The memory profiler (allocations made through ridge's allocator: model buffers, workspaces)."""
    @staticmethod
    def record_history(max_entries: int = 1000000) -> None:
        """Starts recording allocations and frees (at most max_entries events)."""
    @staticmethod
    def stop_recording() -> None:
        """Stops recording allocations."""
    @staticmethod
    def recording() -> bool:
        """Whether allocations are being recorded."""
    @staticmethod
    def dump_snapshot(path: str) -> None:
        """Writes the snapshot file `ridge memory show` and `ridge memory plot` read."""
    @staticmethod
    def current_bytes() -> int:
        """Bytes live in ridge's allocator now."""
    @staticmethod
    def peak_bytes() -> int:
        """The most bytes live at once since the last reset_peak."""
    @staticmethod
    def reset_peak() -> None:
        """Restarts peak_bytes from the bytes live now."""
    @staticmethod
    def snapshot() -> Dict[str, Any]:
        """The snapshot document dump_snapshot writes, as a dict (ridge memory show reads the file)."""
