"""Built-in context of one actor per turn in a session of 1,000,000 stored messages (p50/p95).

The session is a busy world: 100 souls talk in rooms of 2–5, and the measured actor, the
hero, is in 2,000 of the messages (set ``FEMS_BENCH_MESSAGES`` / ``FEMS_BENCH_SEEN`` for other
sizes). A new run continues the session: its first context reads the hero's 2,000 lines with
one range scan of the scope-tag index (the cold figure); then each turn adds a few messages,
one of them in the hero's room, and assembles the hero's context again. That per-turn figure
is what §13.2 costs a running game: it follows the messages new to the actor since its last
turn, not the size of the session. The old way, re-reading everything the actor can see on
every turn, is timed for comparison.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

from fems_runtime.context import ContextCache, builtin_context
from fems_runtime.store import NewMessage, Store, _bulk_insert

from bench import Figure, quick

MESSAGES = 20_000 if quick() else 1_000_000
SEEN = 200 if quick() else 2_000
SOULS = [f"soul{n}" for n in range(100)]
HERO = "hero"
CHUNK = 50_000
TURNS = 21 if quick() else 201


def fill(store: Store, session: int, count: int, seen: int, rng: random.Random) -> None:
    """Bulk-load ``count`` messages with their scope tags straight into the store's tables;
    the hero is in ``seen`` of them, spread evenly."""
    every = count // seen
    now = time.time()
    columns = ("id", "session_id", "seq", "turn", "kind", "speaker_soul", "speaker_name")
    columns += ("content", "created")
    tag_columns = ("message_id", "soul_id", "session_id", "seq")
    database = store.database()
    with database.engine.begin() as db:
        for start in range(0, count, CHUNK):
            messages, tags = [], []
            for seq in range(start + 1, min(start + CHUNK, count) + 1):
                room = rng.sample(SOULS, rng.randint(2, 5))
                if seq % every == 0:
                    room.append(HERO)
                content = f"message {seq} in a room of {len(room)}"
                messages.append((seq, session, seq, seq, "reply", room[0], f"@{room[0]}"))
                messages[-1] += (content, now)
                tags += [(seq, soul, session, seq) for soul in room]
            _bulk_insert(db, "messages", columns, messages)
            _bulk_insert(db, "message_souls", tag_columns, tags)
        sessions = database.tables.sessions
        db.execute(
            sessions.update()
            .where(sessions.c.id == session)
            .values(last_seq=count, last_turn=count)
        )


def percentiles(timings: list[float]) -> str:
    ordered = sorted(timings)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):.3f} ms, p95 {p95:.3f} ms"


def main() -> list[Figure]:
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        with Store(path) as store:
            session = store.open_session("new", title="bench", script="bench.fems", script_hash="0")
            started = time.perf_counter()
            fill(store, session, MESSAGES, SEEN, rng)
            print(f"   loaded {MESSAGES:,} messages in {time.perf_counter() - started:.0f} s")
        with Store(path) as store:  # a new run continues the session
            contexts = ContextCache(store)
            started = time.perf_counter()
            text = contexts.text(session, soul=HERO)
            cold = (time.perf_counter() - started) * 1000
            print(f"   the hero sees {text.count(chr(10) * 2) + 1:,} messages")
            print(f"   first context of the run (one index range scan): {cold:.1f} ms")
            per_turn, whole = [], []
            for turn in range(TURNS):
                room = [*rng.sample(SOULS, 3), HERO]
                store.submit(
                    session,
                    [
                        NewMessage("reply", f"turn {turn} elsewhere", souls=rng.sample(SOULS, 3)),
                        NewMessage("reply", f"turn {turn} with the hero", souls=room),
                        NewMessage("reply", f"turn {turn} elsewhere again", souls=SOULS[:2]),
                    ],
                )
                started = time.perf_counter()
                text = contexts.text(session, soul=HERO)
                per_turn.append((time.perf_counter() - started) * 1000)
                if turn % 20 == 0:
                    started = time.perf_counter()
                    assert builtin_context(store, session, soul=HERO) == text
                    whole.append((time.perf_counter() - started) * 1000)
    print(f"   context per turn, new lines only: {percentiles(per_turn)} over {TURNS} turns")
    print(f"   re-reading all the hero sees every turn (before): {percentiles(whole)}")
    size = f"{MESSAGES // 1000:,}k stored, {SEEN:,} seen"
    return [
        Figure(
            f"context per turn ({size}), p50", f"{statistics.median(per_turn):.3f} ms", "≤ 2 ms"
        ),
        Figure(f"first context of a run ({size})", f"{cold:.1f} ms"),
        Figure(
            f"context re-read whole each turn ({size}), p50", f"{statistics.median(whole):.1f} ms"
        ),
    ]


if __name__ == "__main__":
    main()
