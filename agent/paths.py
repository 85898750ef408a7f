"""Where the project's data directories live (the repo root holds them next to the package)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
SCRIPTS_DIR = ROOT / "verification_scripts"
TAXONOMY_DIR = ROOT / "taxonomy"
KNOWLEDGE_DIR = ROOT / "knowledge"
