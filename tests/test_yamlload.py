"""The manifest, profiles and known-bad tables read with libyaml's parser (agent/yamlload.py) are the same objects
the pure-Python safe loader builds; a YAML error is still a yaml.YAMLError."""

from __future__ import annotations

import pytest
import yaml

from agent.paths import KNOWLEDGE_DIR, ROOT, SCRIPTS_DIR
from agent.yamlload import load_yaml

FILES = sorted({*SCRIPTS_DIR.glob("*.yaml"), *KNOWLEDGE_DIR.glob("*.yaml"), *(ROOT / "knowledge").rglob("*.yaml")})


def test_every_shipped_yaml_file_loads_as_with_the_python_loader() -> None:
    assert len(FILES) >= 4
    for path in FILES:
        text = path.read_text()
        assert load_yaml(text) == yaml.load(text, Loader=yaml.SafeLoader), path


def test_tags_and_errors_stay_those_of_a_safe_loader() -> None:
    assert load_yaml("a: 1\nb: [x, 2.5, null, 2024-01-02]") == yaml.safe_load("a: 1\nb: [x, 2.5, null, 2024-01-02]")
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: !!python/object:os.system {}")
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [1, 2")
