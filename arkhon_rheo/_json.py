r"""JSON text from anyone (a command line argument, a form field), parsed or refused in one line.

`json.loads` fails in three ways, only one of them a `json.JSONDecodeError`:
nesting deeper than the interpreter's recursion limit raises `RecursionError`,
and an integer of more digits than ``sys.get_int_max_str_digits()`` (4,300 by
default) raises a plain `ValueError` with advice meant for programmers. A
lone surrogate escape (``"\ud800"``) decodes to a string nothing can encode
again. `read_json` turns each into a `ValueError` whose message is one short
line saying what is wrong, never echoing the text. This module imports
nothing from the package, so every layer may use it (the command line and the
inspector do).
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["MAX_DEPTH", "JsonSyntaxError", "read_json"]

#: The deepest nesting of lists and objects `read_json` accepts: far beyond any
#: state a person types, and far below the recursion limit of whatever reads it next.
MAX_DEPTH = 100


class JsonSyntaxError(ValueError):
    """The text breaks JSON's grammar (as opposed to nesting too deep, a huge integer...)."""


def read_json(text: str | bytes) -> Any:
    """``text`` parsed as JSON, or a one-line `ValueError` saying why it cannot be.

    Args:
        text: The JSON text (bytes are read as UTF-8).

    Returns:
        The value.

    Raises:
        JsonSyntaxError: If the text is not JSON (a `ValueError`).
        ValueError: If it nests lists and objects deeper than `MAX_DEPTH`, holds
            an integer too long to convert, a lone surrogate or a non-standard
            constant (``NaN``, ``Infinity``). Every message is one line and does
            not quote the text.
    """
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise JsonSyntaxError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ValueError(f"it nests lists or objects more than {MAX_DEPTH} levels deep") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"it is not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise ValueError(
                f"it holds an integer of more than {sys.get_int_max_str_digits()} digits; "
                "pass a long number as a string"
            ) from None
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    _check(value)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; pass a number, or null")


def _check(value: Any) -> None:
    """Refuse nesting past `MAX_DEPTH` and strings with lone surrogates (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
            continue
        if not isinstance(item, (list, dict)):
            continue
        if depth >= MAX_DEPTH:
            raise ValueError(f"it nests lists or objects more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            for key, member in item.items():
                _check_text(key)
                stack.append((member, depth + 1))
        else:
            stack.extend((member, depth + 1) for member in item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"a string holds a lone surrogate (\\u{ord(text[exc.start]):04x}), which is not "
            "text; escape both halves of a pair, or pass the character itself"
        ) from None
