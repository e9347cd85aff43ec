"""``MODULE:ATTR``: the user's machine, loaded from their own module (CLI and inspector).

The module is imported as Python would run it: the working directory is on
``sys.path`` (as with ``python -m``), and a module in a folder of scripts (a
folder without ``__init__.py``, like ``examples/``) has that folder on
``sys.path`` too, as ``python examples/react_agent.py`` would, so it imports
its siblings. A path (``examples/react_agent.py:agent``) names a module by its
file. A module inside a package gets no such help: its siblings are imported
through the package, as they are under ``python -m``.

What the user's code raises (a syntax error, a failed import inside the
module, a factory that raises) becomes one `CommandError` line naming the
module and what to do; its traceback is the error's cause, which ``--debug``
prints.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import CommandError
from ._machine import Machine

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["load_user_machine"]


class ExitStatus:
    """The command line's exit statuses an error here ends with (as ``cli.ExitStatus``)."""

    #: The user's code raised.
    FAILED = 1
    #: A bad target: malformed, or not a machine.
    USAGE = 2
    #: No such module, file or attribute.
    NOT_FOUND = 3


#: What a target must name, for the errors that say what was found instead.
_EXPECTED = "expected a Machine, or a function of no arguments that returns one"
#: How much of an exception's message an error line quotes.
_QUOTED = 300


def _summary(exc: BaseException) -> str:
    """``exc`` as ``Type: message`` on one line (its message's whitespace folded)."""
    text = " ".join(str(exc).split())
    if len(text) > _QUOTED:
        text = text[:_QUOTED] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _users_error(what: str, exc: BaseException, advice: str) -> CommandError:
    """The one-line error for an exception the user's code raised (exit status 1)."""
    return CommandError(
        f"{what} raised {_summary(exc)}; {advice}, or rerun with --debug for the traceback",
        code=ExitStatus.FAILED,
    )


def _on_path(folder: str) -> None:
    """Put ``folder`` first on ``sys.path``, as Python does for the script it runs."""
    if folder not in sys.path:
        sys.path.insert(0, folder)


def _is_path(module_name: str) -> bool:
    return module_name.endswith(".py") or "/" in module_name or os.sep in module_name


def _import_file(module_name: str, target: str) -> ModuleType:
    """The module in file ``module_name``, imported under its stem, its folder on the path."""
    path = Path(module_name)
    if not path.is_file():
        raise CommandError(
            f"no file {module_name!r} (from {target!r}); give the path of a Python file, "
            "or a module name",
            code=ExitStatus.NOT_FOUND,
        )
    folder = str(path.resolve().parent)
    _on_path(folder)
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.dirname(str(getattr(loaded, "__file__", ""))) != folder:
        raise CommandError(
            f"{module_name!r} would be imported as {name!r}, the name of a module imported "
            f"already ({getattr(loaded, '__file__', 'built in')}); rename the file",
            code=ExitStatus.USAGE,
        )
    return _import(name, target)


def _script_folder(module_name: str) -> None:
    """Put the folder of ``module_name`` on the path if it is a folder of scripts, not a package."""
    if "." not in module_name:
        return  # found on the path already
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # the import says why
        return
    if spec is None or not spec.has_location or spec.origin is None:
        return
    folder = os.path.dirname(spec.origin)
    if not os.path.exists(os.path.join(folder, "__init__.py")):
        _on_path(folder)


def _import(module_name: str, target: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CommandError(
                f"no module {module_name!r} (from {target!r}); run from the folder that holds "
                "it, give its path (folder/module.py:ATTR), or set PYTHONPATH",
                code=ExitStatus.NOT_FOUND,
            ) from None
        raise _users_error(
            f"importing module {module_name!r}", exc, "check the module's own imports"
        ) from exc
    except (Exception, SystemExit) as exc:
        raise _users_error(f"importing module {module_name!r}", exc, "fix the module") from exc


def _resolve(target: str) -> Any:
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise CommandError(
            f"expected MODULE:ATTR (like 'myagents:machine'), got {target!r}", code=ExitStatus.USAGE
        )
    if os.getcwd() not in sys.path:  # as `python -m` would: modules beside you import
        sys.path.insert(0, os.getcwd())
    if _is_path(module_name):
        module = _import_file(module_name, target)
    else:
        _script_folder(module_name)
        module = _import(module_name, target)
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CommandError(
                f"module {module_name!r} has no attribute {attr!r}", code=ExitStatus.NOT_FOUND
            ) from None
    return found


def _not_a_factory(found: Any) -> str | None:
    """What ``found`` is when it is certainly no machine factory ("a function returning int").

    ``None``: it may be one (a function returning a `Machine`, or of unknown return type).
    """
    if isinstance(found, type):
        return None if issubclass(found, Machine) else f"the class {found.__name__}"
    if not (inspect.isfunction(found) or inspect.ismethod(found)):
        return None
    returns = _return_type(found)
    if returns is Any:
        return None
    kind = typing.get_origin(returns) or returns
    if returns is type(None):
        return "a function returning None"
    if isinstance(kind, type) and kind is not object and not issubclass(kind, Machine):
        return f"a function returning {kind.__name__}"
    return None


def _return_type(function: Any) -> Any:
    """The return annotation of ``function``, evaluated (`Any` if none, or if it does not resolve).

    Only the return annotation is evaluated: a parameter's may name what is
    imported for type checking only.
    """
    returns = inspect.get_annotations(function).get("return", Any)
    if isinstance(returns, str):
        try:
            returns = eval(returns, getattr(function, "__globals__", {}))
        except Exception:  # a name imported for type checking only: it may be a factory
            return Any
    return returns


def _takes_arguments(found: Any) -> str | None:
    """Why ``found`` cannot be called with no arguments, or ``None`` if it can."""
    try:
        inspect.signature(found).bind()
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature to read (a builtin): try it
        return None
    return None


def load_user_machine(target: str) -> Machine[Any]:
    """The `Machine` named by ``MODULE:ATTR``: the attribute, or what calling it returns.

    Raises:
        CommandError: If the target is malformed (2), is missing (3), is neither
            a machine nor a factory of one taking no arguments (2), or if the
            user's module or factory raised (1: the exception is the cause).
    """
    found = _resolve(target)
    if isinstance(found, Machine):
        return found
    if not callable(found):
        raise CommandError(
            f"{target} is a {type(found).__name__}: {_EXPECTED}", code=ExitStatus.USAGE
        )
    other = _not_a_factory(found)
    if other is not None:
        raise CommandError(
            f"{target} is {other}, not a Machine: {_EXPECTED}", code=ExitStatus.USAGE
        )
    why = _takes_arguments(found)
    if why is not None:
        raise CommandError(
            f"{target} is not a Machine, and it cannot be called with no arguments ({why}): "
            f"{_EXPECTED}",
            code=ExitStatus.USAGE,
        )
    try:
        made = found()
    except (Exception, SystemExit) as exc:
        raise _users_error(f"{target}()", exc, "fix the factory") from exc
    if isinstance(made, Machine):
        return made
    raise CommandError(
        f"{target}() returned a {type(made).__name__}, not a Machine: {_EXPECTED}",
        code=ExitStatus.USAGE,
    )
