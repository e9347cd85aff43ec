"""What the package on an index carries: the wheel builds, holds what it must, and installs.

The wheel is built from this checkout with the project's build backend (hatchling) in this
environment (``pip wheel --no-build-isolation``: nothing is downloaded), then installed with
``pip install --no-deps --no-index`` into a fresh virtualenv and imported from there, never
from the checkout (that one is slow: ~13 s; the build and the wheel's contents are checked in
the default suite). Without hatchling importable here these tests skip (``pip install -e
".[dev]"`` builds the project in an isolated environment and leaves no hatchling behind).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Mapping

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip(
    "hatchling",
    reason="the build backend hatchling is not installed here: `pip install hatchling`",
)


def _env_without_checkout() -> Mapping[str, str]:
    """This process's environment without PYTHONPATH (so the checkout is not importable)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout, in a temporary directory."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ),
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("arkhon_rheo-*.whl")
    return found


def test_the_wheel_carries_the_license_the_type_marker_and_the_plugin(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (dist_info,) = {name.split("/", 1)[0] for name in names if ".dist-info/" in name}
        assert "arkhon_rheo/py.typed" in names
        assert "arkhon_rheo/__init__.py" in names
        licence = archive.read(f"{dist_info}/licenses/LICENSE").decode()
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert licence == (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License")
    assert "Copyright (c) 2026 The arkhon-rheo developers" in licence
    assert "License-Expression: MIT" in metadata
    assert "License-File: LICENSE" in metadata
    assert "[pytest11]\narkhon_rheo = arkhon_rheo.testing.pytest_plugin" in entry_points
    assert "arkhon-rheo = arkhon_rheo.__main__:main" in entry_points
    assert not any(name.startswith("tests/") for name in names)


@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_virtualenv_and_imports_from_there(
    wheel: Path, tmp_path: Path
) -> None:
    target = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(target)
    python = target / "bin" / "python"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=_env_without_checkout(),
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The dependencies (anyio, pydantic, ...) come from this environment's site-packages,
    # added as a plain path: its .pth files (an editable install of the project among
    # them) are not run, so arkhon_rheo can only come from the wheel.
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            env=_env_without_checkout(),
            cwd=tmp_path,
        ).stdout.strip()
    )
    (site_packages / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import importlib.metadata as m, arkhon_rheo, arkhon_rheo.testing.pytest_plugin\n"
        "print(arkhon_rheo.__file__)\n"
        "print(m.version('arkhon-rheo'))\n"
        "print(sorted(e.value for e in m.entry_points(group='pytest11', name='arkhon_rheo')))\n"
    )
    ran = subprocess.run(
        [str(python), "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        env=_env_without_checkout(),
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    where, version, plugins = ran.stdout.splitlines()
    assert Path(where).is_relative_to(site_packages), where
    assert version == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert plugins == "['arkhon_rheo.testing.pytest_plugin']"
    assert (Path(where).parent / "py.typed").is_file()
