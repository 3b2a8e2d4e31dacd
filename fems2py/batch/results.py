"""The results of a batch: one row per session (CSV and JSON) and a summary of the collected
variables, counts by final value with 95% Wilson score intervals (they stay inside [0, 1] and
honest for small counts and shares near 0 or 1, unlike the normal approximation)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Z_95 = 1.959963984540054
COLUMNS = (
    "index",
    "seed",
    "model",
    "session",
    "status",
    "steps",
    "model_calls",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "wall_s",
    "resumed",
    "error",
)


def wilson(successes: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a share ``successes / total``."""
    if total == 0:
        return 0.0, 1.0
    share = successes / total
    denominator = 1 + z * z / total
    centre = (share + z * z / (2 * total)) / denominator
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def shown(value: Any) -> str:
    """A final value as one cell: strings (and actors, ``"@name"``) as they are, the rest as
    JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def table(rows: Sequence[dict[str, Any]], collect: Sequence[str]) -> list[dict[str, Any]]:
    """The rows as the results table shows them: fixed columns, ``set.NAME`` for each ``--set``
    and one column per collected variable."""
    set_names = sorted({name for row in rows for name in row.get("set", {})})
    shaped = []
    for row in rows:
        cells = {column: row.get(column) for column in COLUMNS}
        cells.update({f"set.{name}": row.get("set", {}).get(name) for name in set_names})
        final = row.get("vars") or {}
        cells.update({name: final.get(name) for name in collect})
        shaped.append(cells)
    return shaped


def summarize(
    rows: Sequence[dict[str, Any]], collect: Sequence[str], models: Sequence[str | None]
) -> dict[str, Any]:
    """Counts by status, totals, and for each collected variable the count of each final value
    among completed sessions (per model when several were compared), with its share and 95%
    Wilson interval."""
    statuses = Counter(row["status"] for row in rows)
    summary: dict[str, Any] = {
        "sessions": len(rows),
        "status": dict(sorted(statuses.items())),
        "model_calls": sum(row.get("model_calls") or 0 for row in rows),
        "tokens": sum(
            (row.get("prompt_tokens") or 0) + (row.get("completion_tokens") or 0) for row in rows
        ),
        "cost": round(sum(row.get("cost") or 0.0 for row in rows), 6),
        "collect": {},
    }
    groups = models if len(models) > 1 else (None,)
    for name in collect:
        entries = []
        for model in groups:
            finished = [
                row
                for row in rows
                if row["status"] == "completed" and (model is None or row["model"] == model)
            ]
            counts = Counter(shown((row.get("vars") or {}).get(name)) for row in finished)
            for value, count in counts.most_common():
                low, high = wilson(count, len(finished))
                entry = {"value": value, "count": count, "of": len(finished)}
                if model is not None:
                    entry = {"model": model, **entry}
                entry |= {"share": count / len(finished), "ci95": [low, high]}
                entries.append(entry)
        summary["collect"][name] = entries
    return summary


def summary_text(summary: dict[str, Any]) -> str:
    """The summary as printed after a batch."""
    statuses = ", ".join(f"{count} {status}" for status, count in summary["status"].items())
    lines = [
        f"{summary['sessions']} sessions: {statuses or 'none run'} · "
        f"{summary['model_calls']} model calls · {summary['tokens']} tokens · "
        f"${summary['cost']:.4f}"
    ]
    for name, entries in summary["collect"].items():
        heading = None
        for entry in entries:
            group = f"{name} (model {entry['model']})" if "model" in entry else name
            if group != heading:
                heading = group
                lines.append(f"{group}, of {entry['of']} completed sessions:")
            low, high = entry["ci95"]
            lines.append(
                f"  {entry['value'] or '(empty)':<24} {entry['count']:>6}  "
                f"{entry['share']:6.1%}  95% CI [{low:.1%}, {high:.1%}]"
            )
        if not entries:
            lines.append(f"{name}: no completed session")
    return "\n".join(lines)


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """The shaped rows as CSV (cells that are not text written as JSON)."""
    buffer = io.StringIO()
    columns = list(rows[0]) if rows else list(COLUMNS)
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if value is None else shown(value) for key, value in row.items()})
    return buffer.getvalue()


def json_text(data: Any) -> str:
    """A results file's JSON: indented and with text as written, for people to read too."""
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def write_results(
    path: Path, batch: str, rows: list[dict[str, Any]], summary: dict[str, Any]
) -> None:
    """``.csv``: the table; ``.json``: the batch id, the table and the summary."""
    from fems2py.build import write_atomic

    if path.suffix.lower() == ".csv":
        text = csv_text(rows)
    else:
        text = json_text({"batch": batch, "rows": rows, "summary": summary})
    write_atomic(path, text)


def write_summary(folder: Path, batch: str, summary: dict[str, Any]) -> list[Path]:
    """``summary.json`` (with the batch id) and ``summary.txt`` (as printed) in ``folder``;
    the files written, for the batch to name."""
    from fems2py.build import write_atomic

    files = [folder / "summary.json", folder / "summary.txt"]
    write_atomic(files[0], json_text({"batch": batch, **summary}))
    write_atomic(files[1], summary_text(summary) + "\n")
    return files
