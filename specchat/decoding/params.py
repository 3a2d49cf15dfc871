"""Typed decoder parameters: declared once on the decoder class, read by every surface.

A `Param` knows its type, default, bounds and help, and turns a value from any source — CLI text
(`-p pld.num_pred_tokens=5`), a TOML value from settings.toml, the settings dialog's text — into a
checked value, or into one line that says what is wrong (`pld.num_pred_tokens must be ≥ 1`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specchat.errors import SpecchatError

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"", "none", "null", "default"}


@dataclass(frozen=True)
class Param:
    """One decoder parameter. `kind` is int, float, bool or str; `optional` allows None (absent)."""

    name: str
    kind: type
    default: object
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False
    above: float | None = None  # an exclusive lower bound (top-p > 0)

    @property
    def type_name(self) -> str:
        return {int: "integer", float: "number", bool: "true/false", str: "text"}[self.kind]

    def parse(self, value: object, owner: str = "", *, label: str = "") -> object:
        """The checked value of `value` (text or an already typed value) for decoder `owner`;
        messages name it `owner.name`, or `label` when given (a flag, a settings key)."""
        label = label or (f"{owner}.{self.name}" if owner else self.name)
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE):
            if self.optional:
                return None
            raise SpecchatError(f"{label} needs a value ({self.type_name})")
        typed = self._convert(value, label)
        if self.choices and typed not in self.choices:
            raise SpecchatError(f"{label} must be one of {', '.join(self.choices)}, not {typed!r}")
        if self.above is not None and typed <= self.above:
            raise SpecchatError(f"{label} must be > {_number(self.above)}")
        if self.minimum is not None and typed < self.minimum:
            raise SpecchatError(f"{label} must be ≥ {_number(self.minimum)}")
        if self.maximum is not None and typed > self.maximum:
            raise SpecchatError(f"{label} must be ≤ {_number(self.maximum)}")
        return typed

    def _convert(self, value: object, label: str) -> object:
        wrong = SpecchatError(f"{label} must be {_article(self.type_name)}, not {value!r}")
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise wrong
        if self.kind is str:
            if isinstance(value, str):
                return value.strip()
            raise wrong
        if isinstance(value, bool):
            raise wrong
        try:
            number = float(value) if isinstance(value, str) else value
            if not isinstance(number, int | float) or math.isnan(number):
                raise wrong
            if self.kind is int:
                if float(number) != int(number):
                    raise wrong
                return int(number)
            if math.isinf(number):
                raise wrong
            return float(number)
        except (TypeError, ValueError, OverflowError):
            raise wrong from None


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _article(type_name: str) -> str:
    return f"an {type_name}" if type_name[0] in "aeiou" else f"a {type_name}"
