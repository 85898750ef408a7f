"""YAML as this package reads it: safe loading, on libyaml's parser when PyYAML was built with it (about seven
times faster than the pure-Python one; the manifest, the profiles and the preflight rules are read on every
diagnosis). Both build the same objects from our files: same safe constructor, same resolver."""

from __future__ import annotations

from typing import Any

import yaml

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)  # a safe loader, C or Python
