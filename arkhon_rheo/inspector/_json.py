"""JSON typed into the inspector's forms, read with `arkhon_rheo._json.read_json`.

`read_json` refuses, in one line, what Python's decoder cannot take (deep
nesting, huge integers, lone surrogates, ``NaN``); here its refusal becomes
`InvalidJson`, naming the form field, which the decision form shows on the page.
"""

from __future__ import annotations

from typing import Any

from .._errors import ConfigurationError
from .._json import JsonSyntaxError, read_json

__all__ = ["InvalidJson", "parse_json"]

_ACCEPTED = (
    'write strings in double quotes ("text"), numbers, true/false, null, [lists] or {objects}'
)


class InvalidJson(ConfigurationError):
    """A value typed as JSON is not JSON, or not JSON Python can read back.

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
        InvalidJson: If ``text`` is not JSON, or is JSON `read_json` refuses.
    """
    try:
        return read_json(text)
    except JsonSyntaxError as exc:
        raise InvalidJson(f"{what} is not JSON ({exc}): {_ACCEPTED}") from None
    except ValueError as exc:
        raise InvalidJson(f"{what} cannot be used: {exc}") from None
