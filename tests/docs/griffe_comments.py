"""A griffe extension for the API reference: ``#:`` comments document the attribute below them.

The library documents its constants, enum members and dataclass fields the
Sphinx way, with ``#:`` comment lines just above the assignment::

    #: The store file every command uses unless ``--store`` says otherwise.
    DEFAULT_STORE = "arkhon-rheo.db"

griffe reads only a string literal below an assignment as its docstring; this
extension (named in ``mkdocs.yml``, under ``mkdocstrings``' python handler)
turns the ``#:`` lines above an attribute that has no docstring into one, so
the reference shows them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import griffe

if TYPE_CHECKING:
    import ast

__all__ = ["HashColonComments"]


class HashColonComments(griffe.Extension):
    """Give an attribute without a docstring the ``#:`` comment lines just above it."""

    def on_attribute_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        attr: griffe.Attribute,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        """Set ``attr``'s docstring from the comment above its assignment, if it has one."""
        if attr.docstring is not None or attr.lineno is None:
            return
        if not isinstance(agent, griffe.Visitor):
            return
        lines = agent.code.splitlines()
        comment: list[str] = []
        index = attr.lineno - 2  # the line above the assignment (``lineno`` counts from 1)
        while index >= 0 and lines[index].strip().startswith("#:"):
            comment.insert(0, lines[index].strip()[2:].strip())
            index -= 1
        if comment:
            attr.docstring = griffe.Docstring(
                "\n".join(comment),
                lineno=index + 2,
                endlineno=attr.lineno - 1,
                parent=attr,
            )
