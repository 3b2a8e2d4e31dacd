"""``fems2py batch``: many sessions of one build, on a local process pool or a Ray cluster.

``plan`` decides which sessions a batch holds and its identity, ``worker`` runs one session
(in a pool process or a Ray task: it imports only the runtime and the built module),
``runner`` hands sessions to workers and follows them, ``results`` writes the table and the
summary. This package imports nothing at import time, so a worker starts quickly.
"""


class UsageError(Exception):
    """A mistake in the command line: its message, and a hint when there is one."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
