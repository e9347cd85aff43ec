"""Griffe extensions for the API reference: ``#:`` comments, and pages that introduce a package.

The library documents its constants, enum members and dataclass fields the
Sphinx way, with ``#:`` comment lines just above the assignment::

    #: The store file every command uses unless ``--store`` says otherwise.
    DEFAULT_STORE = "arkhon-rheo.db"

griffe reads only a string literal below an assignment as its docstring; this
extension (named in ``mkdocs.yml``, under ``mkdocstrings``' python handler)
turns the ``#:`` lines above an attribute that has no docstring into one, so
the reference shows them.

`PrivateValues` leaves out the value of an attribute computed by private code
(``self.reply = _checked_reply(name, reply)``): the reference names no private
name. `PageIntroductions` leaves out the docstring of the packages it is given: their
API page opens with its own paragraph, with links, that says all the docstring
says (the docstring stays for ``help()``), so the page does not say it twice.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import griffe

if TYPE_CHECKING:
    import ast
    from collections.abc import Sequence

__all__ = ["HashColonComments", "PageIntroductions", "PrivateValues"]

#: A private name in an expression: ``_name``, ``self._name``, ``module._name``.
_PRIVATE = re.compile(r"(?<!\w)_[A-Za-z]\w*")


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


class PageIntroductions(griffe.Extension):
    """Render no docstring for the packages whose API page introduces them in its own words.

    Args:
        packages: The packages' dotted paths, like ``arkhon_rheo.react``.
    """

    def __init__(self, packages: Sequence[str] = ()) -> None:
        super().__init__()
        self.packages = frozenset(packages)

    def on_module_members(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        mod: griffe.Module,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        """Drop ``mod``'s docstring if it is one of the packages."""
        if mod.path in self.packages:
            mod.docstring = None


class PrivateValues(griffe.Extension):
    """Show no value for an attribute whose value is computed by private names."""

    def on_attribute_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        attr: griffe.Attribute,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        """Drop ``attr``'s value if it names something private."""
        if attr.value is not None and _PRIVATE.search(str(attr.value)):
            attr.value = None
