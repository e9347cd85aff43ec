"""Small parts of the inspector's pages: query parameters, JSON for display, the favicon."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.responses import Response

from ._json import parse_json

if TYPE_CHECKING:
    from collections.abc import Mapping

    from starlette.requests import Request

__all__ = [
    "FAVICON",
    "LIST_SIZE",
    "MAX_LIST_SIZE",
    "BadInput",
    "decision_input",
    "favicon",
    "jsontext",
    "list_query",
    "pretty",
    "whole",
]

#: Sessions the session list shows a page (``?limit=N``), newest change first.
LIST_SIZE = 50
#: The most sessions a page of the list may show.
MAX_LIST_SIZE = 1000


class BadInput(Exception):
    """An edit that changes nothing, or a query parameter out of its range."""


def whole(request: Request, name: str, default: int, most: int | None) -> int:
    """The query parameter ``name`` as a whole number from 1 (to ``most``), or ``default``."""
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdecimal() or int(text) < 1 or (most is not None and int(text) > most):
        upto = f" to {most}" if most is not None else ""
        raise BadInput(f"{name} must be a whole number from 1{upto}, got {text!r}")
    return int(text)


def list_query(status: str, limit: int) -> str:
    """The session list's query string, less its page: the status filter and the page size."""
    query = {"status": status} if status else {}
    if limit != LIST_SIZE:
        query["limit"] = str(limit)
    return urlencode(query)


def jsontext(value: Any, indent: int | None = None) -> str:
    """A stored value as JSON text, for display (escaped by the template, like all text)."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=repr)


def pretty(text: str) -> str:
    """Indent JSON text for display (left as it is if it is not JSON)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return text


#: The inspector's icon: a small state graph (two states and a move), in the page's blue.
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="7" fill="#111827"/>'
    '<circle cx="9" cy="16" r="5" fill="#2563eb"/><circle cx="23" cy="16" r="5" fill="#e5e7eb"/>'
    '<path d="M14 16h4" stroke="#e5e7eb" stroke-width="2.5"/></svg>'
)


async def favicon(request: Request) -> Response:
    """The icon, an SVG; served without the token (it shows nothing of the store)."""
    return Response(
        FAVICON,
        media_type="image/svg+xml",
        headers={"cache-control": "public, max-age=86400"},
    )


def decision_input(fields: Mapping[str, str], decision: str) -> tuple[Any, dict[str, Any] | None]:
    """The resume value and the edited fields of a submitted form, parsed from JSON.

    Raises:
        InvalidJson: If a value is not JSON, or JSON Python cannot read back.
    """
    value: Any = None
    if decision == "approve" and fields.get("value", "").strip():
        value = parse_json("the resume value", fields["value"])
    edit: dict[str, Any] | None = None
    if decision == "edit":
        edit = {
            name[len("field.") :]: parse_json(f"field {name[len('field.') :]!r}", text)
            for name, text in fields.items()
            if name.startswith("field.")
        }
    return value, edit
