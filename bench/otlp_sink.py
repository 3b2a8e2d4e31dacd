"""An OTLP/HTTP receiver for the benchmarks, in a process of its own so that receiving what is
exported is not charged to the run being measured: ``python -m bench.otlp_sink`` prints its
address, answers every export 200 (keeping nothing) and
serves until its standard input closes (at the benchmark's exit)."""

from __future__ import annotations

import atexit
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


def otlp_sink() -> str:
    """The address of a sink running in a child process until this process exits (after the
    exporters that send to it, which were started later and close first)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.otlp_sink"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdout is not None and child.stdin is not None
    atexit.register(child.wait, 30)
    atexit.register(child.stdin.close)
    return child.stdout.readline().decode().strip()


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the benchmark closes it
    server.shutdown()


if __name__ == "__main__":
    main()
