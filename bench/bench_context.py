"""Built-in context retrieval for one soul in a session of 1,000,000 stored messages (p50/p95).

The session is a busy world: 100 souls in rooms of 2–5, so each soul sees about 3% of the
messages (~30,000). The timing covers the whole built-in context (§13.2): the scope-tag index
scan, loading the rows and formatting the text. Set ``FEMS_BENCH_MESSAGES`` for another size.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from fems_runtime.context import builtin_context
from fems_runtime.store import Store

MESSAGES = int(os.environ.get("FEMS_BENCH_MESSAGES", "1000000"))
SOULS = [f"soul{n}" for n in range(100)]
CHUNK = 50_000
RUNS = 21


def fill(store: Store, session: int, count: int, rng: random.Random) -> None:
    """Bulk-load ``count`` messages with their scope tags straight into the store's tables."""
    t = store._t  # the benchmark loads rows in bulk; the public API adds one message at a time
    now = time.time()
    with store.engine.begin() as db:
        for start in range(0, count, CHUNK):
            messages, tags = [], []
            for seq in range(start + 1, min(start + CHUNK, count) + 1):
                room = rng.sample(SOULS, rng.randint(2, 5))
                messages.append(
                    {
                        "id": seq,
                        "session_id": session,
                        "seq": seq,
                        "turn": seq,
                        "kind": "reply",
                        "speaker_soul": room[0],
                        "speaker_name": f"@{room[0]}",
                        "content": f"message {seq} in a room of {len(room)}",
                        "created": now,
                    }
                )
                tags += [
                    {"message_id": seq, "soul_id": soul, "session_id": session, "seq": seq}
                    for soul in room
                ]
            db.execute(t.messages.insert(), messages)
            db.execute(t.message_souls.insert(), tags)
        db.execute(t.sessions.update().where(t.sessions.c.id == session).values(last_seq=count))


def main() -> None:
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "bench.db")
        session = store.open_session("new", title="bench", script="bench.fems", script_hash="0")
        started = time.perf_counter()
        fill(store, session, MESSAGES, rng)
        print(f"   loaded {MESSAGES:,} messages in {time.perf_counter() - started:.0f} s")
        timings, sizes = [], []
        for run in range(RUNS):
            soul = SOULS[run % len(SOULS)]
            started = time.perf_counter()
            text = builtin_context(store, session, soul=soul)
            timings.append((time.perf_counter() - started) * 1000)
            sizes.append(text.count("\n\n") + 1)
        store.close()
    timings.sort()
    p95 = timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))]
    print(f"   one soul sees ~{statistics.median(sizes):,.0f} messages")
    print(f"   built-in context: p50 {statistics.median(timings):.0f} ms, p95 {p95:.0f} ms")
    print(
        f"   per visible message: {statistics.median(timings) / statistics.median(sizes) * 1000:.1f} µs"
    )


if __name__ == "__main__":
    main()
