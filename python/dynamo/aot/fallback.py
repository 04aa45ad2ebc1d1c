"""The exception that sends a graph to the eager runner, with the reason."""

__all__ = ["Fallback"]


class Fallback(Exception):
    """The AOT layer cannot promise eager's results for this graph; str(e) says why."""
