"""How many fuzz cases ran, by entry point and status: printed at the end of
the pytest session and, when MIOPEN_BN_FUZZ_REPORT names a file, written
there as JSON, so a run's figures can be quoted."""

from __future__ import annotations

import collections
import json
import os

REPORT_VARIABLE = "MIOPEN_BN_FUZZ_REPORT"
_counts: collections.Counter = collections.Counter()
_verified: collections.Counter = collections.Counter()  # successes compared with the reference


def record(function: str, status: int) -> None:
    _counts[(function, int(status))] += 1


def record_verified(function: str) -> None:
    _verified[function] += 1


def total() -> int:
    return sum(_counts.values())


def by_function() -> dict:
    """{function: {status: cases}}"""
    table: dict = {}
    for (function, status), cases in sorted(_counts.items()):
        table.setdefault(function, {})[status] = cases
    return table


def summary_lines() -> list:
    if not _counts:
        return []
    lines = [f"C ABI fuzz: {total()} cases"]
    for function, statuses in by_function().items():
        spread = ", ".join(f"status {status}: {cases}" for status, cases in statuses.items())
        verified = f"; {_verified[function]} checked against the reference" if _verified[function] else ""
        lines.append(f"  {function}: {sum(statuses.values())} ({spread}{verified})")
    return lines


def write_report() -> None:
    path = os.environ.get(REPORT_VARIABLE)
    if path and _counts:
        with open(path, "w", encoding="utf-8") as out:
            report = {"cases": total(), "by_function": by_function(), "verified": dict(_verified)}
            json.dump(report, out, indent=1)
