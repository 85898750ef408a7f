"""The build step that makes a wheel carry what aidai reads at run time.

The verification scripts, the taxonomy and the knowledge base are top-level folders of the repository (the design
keeps them there); a wheel only holds packages, so build_py copies each folder into the built package as
`agent/_data/<folder>`, where agent/paths.py looks first. An editable install reads the checkout's folders in place
and copies nothing. Everything else is declared in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA_FOLDERS = ("verification_scripts", "taxonomy", "knowledge")  # agent/paths.py's DATA_FOLDERS
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        for folder in DATA_FOLDERS:
            source = HERE / folder
            if not source.is_dir():  # an sdist built without MANIFEST.in's grafts: fail loudly, never ship less
                raise FileNotFoundError(f"{source} is missing: the wheel would not carry what aidai reads")
            target = Path(self.build_lib) / "agent" / "_data" / folder
            shutil.rmtree(target, ignore_errors=True)  # a file removed from the repo must leave the wheel too
            shutil.copytree(source, target, ignore=SKIP)


setup(cmdclass={"build_py": BuildPyWithData})
