"""The scripts of ``python -m bench compare``, written in the dialect both FemWA 1.1.11 and
fems2py accept, and what a correct run of each does.

Bench names are parametric: ``chain_N``, ``par_N``, ``assign_N`` (N even) and ``werewolf_Rr``.
Each difference between the two engines shapes the dialect:

- two-space indentation: FemWA's normalizer mis-nests node declarations indented by four
  (fems2py takes any width, §1.2);
- loops are ``[A] -> [B] -> [A]`` with both nodes bound to the same action (hence N even):
  FemWA drops self-loop edges;
- the body nodes of werewolf's ``for`` loops are bound inline (``-> [W]:wolf_talk ->``);
- each ``for`` body carries an ``if (True)`` edge: without one FemWA finds no exit edge and
  skips the loop's exit node;
- the fake server answers each prompt with the text of its ``FAKE_REPLY[[…]]`` marker, so the
  model's reply can advance a counter with a signal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_BENCHES = ("chain_200", "par_10", "par_50", "par_200", "assign_10000", "werewolf_90r")

# chain_N offline: fems/mock writes signals only for declared outs, and `ask` has none, so the
# offline run uses a replies file with the fake server's own reply instead
CHAIN_REPLIES = {"*": ["Step done. SET VARIABLE: <<n += 1>>"]}

_NAME = re.compile(r"^(chain|par|assign)_(\d+)$|^werewolf_(\d+)r$")


class BenchError(ValueError):
    """An unknown or malformed bench name."""


@dataclass(frozen=True)
class Expected:
    """What a correct run of a bench does."""

    model_calls: int
    variables: dict[str, int]


def parse(name: str) -> tuple[str, int]:
    """``("chain", 200)`` for ``chain_200``, ``("werewolf", 90)`` for ``werewolf_90r``."""
    found = _NAME.match(name.strip())
    if not found:
        raise BenchError(
            f"unknown bench {name!r}: use chain_N, par_N, assign_N or werewolf_Rr "
            f"(default: {','.join(DEFAULT_BENCHES)})"
        )
    if found.group(1):
        kind, n = found.group(1), int(found.group(2))
    else:
        kind, n = "werewolf", int(found.group(3))
    if n < 1 or (kind in ("chain", "assign") and n % 2):
        raise BenchError(f"{name}: {kind}_N needs an even N >= 2 (the loop does two steps a lap)")
    return kind, n


def expected(name: str) -> Expected:
    kind, n = parse(name)
    if kind == "chain":
        return Expected(n, {"n": n})
    if kind == "par":
        return Expected(n, {})
    if kind == "assign":
        return Expected(0, {"n": n})
    return Expected(11 * n, {"round": n})


def script(name: str, max_concurrency: int | None = None) -> str:
    """The ``.fems`` text of a bench; ``max_concurrency`` goes into the par scripts' meta
    (fems2py's cap on calls in flight, default 8; FemWA ignores it and uses a pool of 10)."""
    kind, n = parse(name)
    if kind == "chain":
        return _loop(f"bench-chain-{n}", n, _CHAIN_ACTION, "ask")
    if kind == "assign":
        return _loop(f"bench-assign-{n}", n, _ASSIGN_ACTION, "inc")
    if kind == "par":
        return _par(n, max_concurrency)
    return _werewolf(n)


_CHAIN_ACTION = """actors:
  ai @eve = soul:bench_eve

action ask @ai(@eve):
  prompt: "Step {n}: say something short. FAKE_REPLY[[Step done. SET VARIABLE: <<n += 1>>]]"
  scope: [@eve]
"""

_ASSIGN_ACTION = """action inc @assign:
  out:
    n += 1
"""


def _loop(title: str, n: int, action: str, name: str) -> str:
    """n turns of one action: a two-node loop that a counter ends."""
    return f"""meta:
  name = {title}
  session = new

vars:
  n = 0

{action}
mainflow:
  [A]: {name}
  [B]: {name}
  [START] -> [A] -> [B]
  [B] -> if (n < {n}) -> [A]
  [B] -> if (n >= {n}) -> [END]
"""


def _par(n: int, cap: int | None) -> str:
    """One model call for each of n actors, all in one ``par``."""
    names = [f"@w{i}" for i in range(n)]
    actors = "\n".join(f"  ai {a} = soul:bench_w{i}" for i, a in enumerate(names))
    cap_line = f"  max_concurrency = {cap}\n" if cap else ""
    return f"""meta:
  name = bench-par-{n}
  session = new
{cap_line}
vars:
  workers = [{", ".join(names)}]
  @w = ""

actors:
{actors}

action work @ai(@w):
  prompt: "You are {{@w}}. Do one unit of work. FAKE_REPLY[[Work unit finished.]]"
  scope: [@w]

mainflow:
  [START] -> [A] -> par @w in workers:
    -> [W]:work ->
  -> [END]
"""


def _werewolf(rounds: int) -> str:
    """11 model calls a round (GM, 2 wolves in a private scope, 8 players in public); each call
    stores 2 messages, so 90 rounds leave about 2,000 messages of context."""
    players = [f"@p{i}" for i in range(1, 9)]
    actors = "\n".join(f"  ai {p} = soul:ww_{p[1:]}" for p in players)
    return f"""meta:
  name = bench-werewolf-{rounds}r
  session = new

vars:
  round = 0
  players = [{", ".join(players)}]
  wolves = [@p1, @p2]
  @wolf = ""
  @speaker = ""

actors:
  ai @gm = soul:ww_gm
{actors}

action night @ai(@gm):
  prompt: "Night {{round}} begins. Narrate briefly. FAKE_REPLY[[Night falls over the village; everyone closes their eyes.]]"
  scope: [@gm] + players

action wolf_talk @ai(@wolf):
  prompt: "Night {{round}}. You are {{@wolf}}, a werewolf. Discuss a target with your partner. FAKE_REPLY[[Let us target someone who has been quiet so far.]]"
  scope: [@gm] + wolves

action day_speak @ai(@speaker):
  prompt: "Day {{round}}. You are {{@speaker}}. Share your suspicion in one sentence. FAKE_REPLY[[I find the previous speaker a little suspicious.]]"
  scope: [@gm] + players

action next_round @assign:
  out:
    round += 1

mainflow:
  [N]: night
  [R]: next_round
  [START] -> [N] -> [P1]
  [P1] -> for @wolf in wolves:
    -> if (True) -> [W]:wolf_talk ->
  -> [D]
  [D] -> [P2]
  [P2] -> for @speaker in players:
    -> if (True) -> [S]:day_speak ->
  -> [R]
  [R] -> if (round < {rounds}) -> [N]
  [R] -> if (round >= {rounds}) -> [END]
"""


def write(folder: Path, names: list[str], max_concurrency: int | None = None) -> dict[str, Path]:
    """Write ``NAME.fems`` for each bench, and ``chain_replies.json``; ``{name: path}``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names:
        path = folder / f"{name}.fems"
        path.write_text(script(name, max_concurrency), encoding="utf-8")
        paths[name] = path
    (folder / "chain_replies.json").write_text(json.dumps(CHAIN_REPLIES), encoding="utf-8")
    return paths
