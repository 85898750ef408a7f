"""Where the data aidai reads at run time lives: the verification scripts (with their manifest, profiles,
catalogues and checklib helpers), the taxonomy and its schema, the knowledge base and the seed incident DB.

In the repository they are top-level folders next to the package (the design keeps them there). A wheel or sdist
install carries the same folders inside the package, as `agent/_data/<folder>` (setup.py's build step copies
them), so an installed aidai never depends on a checkout's layout. Every reader asks this module.
"""

from __future__ import annotations

import importlib.util
import os
from importlib.resources import files
from pathlib import Path
from types import ModuleType

# A pip/pipx install unpacks the wheel on disk, and the scripts must be real files (run as subprocesses, uploaded
# over SFTP), so the package's location is used as a directory.
PACKAGE_DIR = Path(str(files("agent"))).resolve()
ROOT = PACKAGE_DIR.parent  # the source checkout, when aidai runs from one (tests, eval and git look here)
BUNDLED = PACKAGE_DIR / "_data"
DATA_FOLDERS = ("verification_scripts", "taxonomy", "knowledge")  # setup.py copies exactly these
INSTALLED = BUNDLED.is_dir()  # built into a wheel (or installed from an sdist), not an editable checkout
RESOURCES = BUNDLED if INSTALLED else ROOT
SCRIPTS_DIR = RESOURCES / "verification_scripts"
TAXONOMY_DIR = RESOURCES / "taxonomy"
KNOWLEDGE_DIR = RESOURCES / "knowledge"
APP_NAME = "aidai"
ENV_DATA_DIR = "AIDAI_DATA_DIR"


def load_script(name: str) -> ModuleType:
    """A module of the verification scripts (`checklib`, `checklib_record` ...), loaded from SCRIPTS_DIR under a
    private name: they are stdlib-only files shipped to hosts, not part of the package."""
    spec = importlib.util.spec_from_file_location(f"aidai_{name}", SCRIPTS_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def default_data_dir() -> Path:
    """`AIDAI_DATA_DIR` if set, else the per-user data directory of the platform (e.g. ~/.local/share/aidai)."""
    env = os.environ.get(ENV_DATA_DIR, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))
