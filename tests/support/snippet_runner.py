"""Run one documentation page's ``python`` blocks in this one process, each as a program.

`tests/test_docs.py` passes this file's text to ``python -c`` (so ``sys.path[0]``
is the page's own directory, as for one ``python -c`` per block), with the path
of a JSON file of the page's programs (``{"name", "code"}`` each) and the path
to write the results to: ``{"ok": true}`` or ``{"ok": false, "error": traceback}``
per program, in order. Each program runs in a fresh ``__main__`` namespace (no
name of one block reaches the next); a program that calls ``sys.exit(0)`` ran.
What each program prints to its standard output (file descriptor 1, so what
its subprocesses and log handlers write there too) is captured on its own and
kept as its result's ``"stdout"``: `tests/test_docs.py` compares it with the
output its page shows. What it writes to stderr goes to this process's stderr.
One process per page instead of one per block: the interpreter and the package
are imported once for the page. Nothing here imports the package itself.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import tempfile
import traceback
import types
from pathlib import Path


def run_program(name: str, code: str) -> dict[str, object]:
    """Run ``code`` as ``__main__``; its outcome and what it printed, as a JSON-able dict."""
    with tempfile.TemporaryFile() as sink:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(sink.fileno(), 1)
        try:
            result = _run(name, code)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        sink.seek(0)
        result["stdout"] = sink.read().decode(errors="replace")
    return result


def _run(name: str, code: str) -> dict[str, object]:
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        exec(compile(code, name, "exec"), main.__dict__)
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            return {"ok": False, "error": f"{name} exited with {exit_.code!r}"}
    except BaseException:
        return {"ok": False, "error": traceback.format_exc()}
    finally:
        sys.modules["__main__"] = saved
        sys.stdout.flush()
        sys.stderr.flush()
    return {"ok": True}


def main(programs_path: str, results_path: str) -> None:
    """Run each program of ``programs_path`` and write the results as they come."""
    programs = json.loads(Path(programs_path).read_text())
    results: list[dict[str, object]] = []
    for program in programs:
        print(f"--- {program['name']}", file=sys.stderr, flush=True)
        results.append(run_program(program["name"], program["code"]))
        Path(results_path).write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
