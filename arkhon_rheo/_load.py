"""``MODULE:ATTR``: the user's object (a machine, a state factory), loaded from their module.

The one loader of the package: the command line, the inspector and the crash
harness (in its parent and in each child process) load what a target names
through it, so a target means the same everywhere.

The module is imported as Python would run it: the working directory is on
``sys.path`` (as with ``python -m``), and a module in a folder of scripts (a
folder without ``__init__.py``, like ``examples/``) has that folder on
``sys.path`` too, as ``python examples/react_agent.py`` would, so it imports
its siblings. A path (``examples/react_agent.py:agent``) names a module by its
file. A module inside a package gets no such help: its siblings are imported
through the package, as they are under ``python -m``.

What the user's code raises (a syntax error, a failed import inside the
module, a factory that raises) becomes one `CommandError` line naming the
module and what to do, with the exit status the command line ends with; its
traceback is the error's cause, which ``--debug`` prints. A caller that is no
command (the crash harness) gets the same line as a `ConfigurationError`
(``errors=as_configuration``).

A leaf of the package: it imports no layer, so any layer may load with it;
the kind of object it loads (`Machine`) is the caller's.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import CommandError, ConfigurationError
from ._errors._cli import ExitStatus

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["as_configuration", "load_factory", "load_target"]

#: How an error is made: ``errors(message, code=status)``.
Errors = Callable[..., Exception]
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


def _not_a_factory(found: Any, kind: type) -> str | None:
    """What ``found`` is when it is certainly no factory of ``kind`` ("a function returning int").

    ``None``: it may be one (a function returning a ``kind``, or of unknown return type).
    """
    if isinstance(found, type):
        return None if issubclass(found, kind) else f"the class {found.__name__}"
    if not (inspect.isfunction(found) or inspect.ismethod(found)):
        return None
    returns = _return_type(found)
    if returns is Any:
        return None
    origin = typing.get_origin(returns) or returns
    if returns is type(None):
        return "a function returning None"
    if isinstance(origin, type) and origin is not object and not issubclass(origin, kind):
        return f"a function returning {origin.__name__}"
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


def as_configuration(message: str, *, code: int) -> ConfigurationError:
    """The loader's error as a `ConfigurationError`, for a caller that is no command."""
    del code  # the exit status is the command line's
    return ConfigurationError(message)


def load_target(target: str, kind: type, *, errors: Errors = CommandError) -> Any:
    """The ``kind`` named by ``MODULE:ATTR``: the attribute, or what calling it returns.

    Args:
        target: ``module:attr`` or ``path/to/file.py:attr`` (the attribute may be dotted).
        kind: What the target must name (`Machine`), or a function of no arguments
            returning one.
        errors: Makes the error raised, as ``errors(message, code=status)``:
            `CommandError` (the default), or `as_configuration`.

    Raises:
        CommandError: If the target is malformed (2), is missing (3), is neither
            a ``kind`` nor a factory of one taking no arguments (2), or if the
            user's module or factory raised (1: the exception is the cause).
            What ``errors`` makes instead, if given.
    """
    try:
        return _load(target, kind)
    except CommandError as exc:
        if errors is CommandError:
            raise
        raise errors(str(exc), code=exc.code) from exc.__cause__


def load_factory(target: str, *, errors: Errors = CommandError) -> Callable[[], Any]:
    """The function of no arguments named by ``MODULE:ATTR`` (a state factory, say), uncalled.

    Raises:
        CommandError: As `load_target` does, or if the target is not callable (2);
            what ``errors`` makes instead, if given.
    """
    try:
        found = _resolve(target)
        if not callable(found):
            raise CommandError(
                f"{target} is a {type(found).__name__}: expected a function of no arguments",
                code=ExitStatus.USAGE,
            )
    except CommandError as exc:
        if errors is CommandError:
            raise
        raise errors(str(exc), code=exc.code) from exc.__cause__
    return typing.cast("Callable[[], Any]", found)


def _load(target: str, kind: type) -> Any:
    name = kind.__name__
    expected = f"expected a {name}, or a function of no arguments that returns one"
    found = _resolve(target)
    if isinstance(found, kind):
        return found
    if not callable(found):
        raise CommandError(
            f"{target} is a {type(found).__name__}: {expected}", code=ExitStatus.USAGE
        )
    other = _not_a_factory(found, kind)
    if other is not None:
        raise CommandError(f"{target} is {other}, not a {name}: {expected}", code=ExitStatus.USAGE)
    why = _takes_arguments(found)
    if why is not None:
        raise CommandError(
            f"{target} is not a {name}, and it cannot be called with no arguments ({why}): "
            f"{expected}",
            code=ExitStatus.USAGE,
        )
    try:
        made = found()
    except (Exception, SystemExit) as exc:
        raise _users_error(f"{target}()", exc, "fix the factory") from exc
    if isinstance(made, kind):
        return made
    raise CommandError(
        f"{target}() returned a {type(made).__name__}, not a {name}: {expected}",
        code=ExitStatus.USAGE,
    )
