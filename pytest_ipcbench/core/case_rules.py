"""Per-case thresholds and waivers: the ``thresholds`` and ``waivers`` keys of ``[tool.ipcbench]``
(docs/thresholds.md).

A waived case keeps its verdict and is listed as waived in every report; it never makes the
outcome REGRESSION. A waiver past its date is an error (exit 2 naming it) in compare and the gate,
so an exception cannot outlive its reason unnoticed.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from fnmatch import fnmatchcase
from typing import Any

from .errors import UsageError

KEYS = ("thresholds", "waivers")
WAIVER_KEYS = ("case", "reason", "expires")
MAX_RULES = 1000
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)
_PERCENT = re.compile(r"[0-9]+(\.[0-9]*)?%?|\.[0-9]+%?", re.ASCII)


class RuleError(UsageError):
    """A bad threshold or waiver in ``[tool.ipcbench]``, or a waiver past its date (exit 2)."""


@dataclass(frozen=True)
class Waiver:
    """A case pattern whose slowdown is accepted, why, and until when (inclusive)."""

    case: str
    reason: str
    expires: date

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "expires": self.expires.isoformat()}  # the verdicts file's (version 1)

    def describe(self) -> str:
        return f"waived until {self.expires.isoformat()} ({self.case}): {self.reason}"


@dataclass(frozen=True)
class CaseRules:
    """The thresholds and waivers one pyproject.toml declares (``source`` names it)."""

    thresholds: tuple[tuple[str, float], ...] = ()
    waivers: tuple[Waiver, ...] = ()
    source: str = ""

    def threshold_for(self, key: str, default: float) -> float:
        """The first threshold pattern that matches ``key``, else ``default``."""
        return next((t for pattern, t in self.thresholds if fnmatchcase(key, pattern)), default)

    def waiver_for(self, key: str) -> Waiver | None:
        return next((w for w in self.waivers if fnmatchcase(key, w.case)), None)

    def check_expiry(self, today: date | None = None) -> None:
        """RuleError naming every waiver past its date (``today``: UTC)."""
        today = today or datetime.now(timezone.utc).date()
        expired = [w for w in self.waivers if w.expires < today]
        if expired:
            names = "; ".join(f"case = {w.case!r} (expired {w.expires.isoformat()}: {w.reason})" for w in expired)
            raise RuleError(f"{self.source}: expired waiver(s): {names}. A waiver holds until its date: renew it "
                            f"with a new date and reason, or remove it and let the case be judged")

    def __bool__(self) -> bool:
        return bool(self.thresholds or self.waivers)


def _pattern(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RuleError(f"{where}: a case pattern must be a non-empty string, got {value!r}")
    if any(not c.isprintable() for c in value) or value != value.strip():
        raise RuleError(f"{where}: case pattern {value!r} has spaces at an end or unprintable characters")
    depth = 0
    for c in value:  # fnmatch reads an unclosed '[' as a literal: a typo that would match nothing
        depth += c == "["
        if c == "]" and depth:
            depth -= 1
    if depth:
        raise RuleError(f"{where}: case pattern {value!r} has an unclosed '['")
    return value


def _threshold(value: Any, where: str) -> float:
    if isinstance(value, str) and _PERCENT.fullmatch(value.strip()):
        raw = value.strip()
        x = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value)
    else:
        raise RuleError(f"{where}: threshold {value!r} is not a number (e.g. 0.25 or \"25%\")")
    if not (math.isfinite(x) and 0 <= x < 10):
        raise RuleError(f"{where}: threshold {value!r} out of range: expected 0 <= t < 10 (0.25 = 25%)")
    return x


def _date(value: Any, where: str) -> date:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, str) and _DATE.fullmatch(value.strip()):
        with contextlib.suppress(ValueError):
            return date.fromisoformat(value.strip())
    raise RuleError(f"{where}: expires = {value!r} is not a date (YYYY-MM-DD, e.g. 2026-12-31)")


def parse_rules(table: dict[str, Any], source: str) -> CaseRules:
    """``thresholds`` and ``waivers`` of a ``[tool.ipcbench]`` table; RuleError naming the key."""
    thresholds: list[tuple[str, float]] = []
    raw = table.get("thresholds", {})
    if not isinstance(raw, dict):
        raise RuleError(f"{source}: thresholds must be a table of case pattern -> threshold "
                        f"([tool.ipcbench.thresholds]), got {raw!r}")
    if len(raw) > MAX_RULES:
        raise RuleError(f"{source}: {len(raw)} thresholds; at most {MAX_RULES}")
    for pattern, value in raw.items():
        where = f"{source}: thresholds.{pattern!r}" if isinstance(pattern, str) else f"{source}: thresholds"
        thresholds.append((_pattern(pattern, where), _threshold(value, where)))
    waivers: list[Waiver] = []
    raw_w = table.get("waivers", [])
    if not isinstance(raw_w, list):
        raise RuleError(f"{source}: waivers must be an array of tables ([[tool.ipcbench.waivers]]), got {raw_w!r}")
    if len(raw_w) > MAX_RULES:
        raise RuleError(f"{source}: {len(raw_w)} waivers; at most {MAX_RULES}")
    for i, w in enumerate(raw_w):
        where = f"{source}: waivers[{i}]"
        if not isinstance(w, dict):
            raise RuleError(f"{where}: expected a table with {', '.join(WAIVER_KEYS)}, got {w!r}")
        unknown = sorted(set(w) - set(WAIVER_KEYS))
        missing = [k for k in WAIVER_KEYS if k not in w]
        if unknown or missing:
            raise RuleError(f"{where}: " + "; ".join(
                ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                + ([f"missing {', '.join(missing)}"] if missing else [])) + f" (a waiver has {', '.join(WAIVER_KEYS)})")
        reason = w["reason"]
        if not isinstance(reason, str) or not reason.strip():
            raise RuleError(f"{where}: reason must say why the slowdown is accepted, got {reason!r}")
        waivers.append(Waiver(_pattern(w["case"], where + ".case"), reason.strip(), _date(w["expires"], where)))
    return CaseRules(tuple(thresholds), tuple(waivers), source)
