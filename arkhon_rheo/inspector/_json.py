"""Parse JSON typed by a person, refusing what Python's decoder cannot take with a typed error.

``json.loads`` raises more than `json.JSONDecodeError`: `RecursionError` for
nesting deeper than the interpreter's recursion limit (``"[" * 100000``), and
a plain `ValueError` for an integer literal longer than the interpreter's
integer-string conversion limit (4,300 digits by default). `parse_json` turns
each into `InvalidJson`, which says what was wrong and what to write instead.
"""

from __future__ import annotations

import json
from typing import Any

from .._errors import ConfigurationError

__all__ = ["InvalidJson", "parse_json"]

_ACCEPTED = (
    'write strings in double quotes ("text"), numbers, true/false, null, [lists] or {objects}'
)


class InvalidJson(ConfigurationError):
    """A value typed as JSON is not JSON, or not JSON Python can decode.

    The message names the value and why it was refused.
    """


def parse_json(what: str, text: str) -> Any:
    """The value of the JSON ``text``, or `InvalidJson` naming ``what`` and why not.

    Args:
        what: What the text is, for the message (``"field 'notes'"``).
        text: The JSON text.

    Returns:
        The decoded value.

    Raises:
        InvalidJson: If ``text`` is not JSON, nests too deeply for Python's
            decoder, or holds an integer with more digits than Python converts.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        reason = f"{what} is not JSON ({exc.msg} at column {exc.colno}): {_ACCEPTED}"
    except RecursionError:
        reason = (
            f"{what} is nested too deeply for Python's JSON decoder: "
            f"use fewer levels of [lists] and {{objects}}"
        )
    except ValueError as exc:  # an integer past sys.get_int_max_str_digits()
        if "digits" not in str(exc):
            raise
        reason = (
            f"{what} holds an integer with more digits than Python converts from text "
            f"(see sys.set_int_max_str_digits): write a shorter number, or the digits as a string"
        )
    raise InvalidJson(reason) from None
