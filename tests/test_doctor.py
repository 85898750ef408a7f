"""`aidai --version`, `aidai doctor`, and the message a missing extra gives (issue 38)."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent import installation, pretriage
from agent.cli.main import app
from agent.paths import ROOT

runner = CliRunner()


def doctor_json(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["doctor", "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_version_is_the_installed_metadata() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"aidai {importlib.metadata.version('aidai')}"


def test_doctor_on_the_checkout_with_an_empty_data_dir(tmp_path: Path) -> None:
    code, report = doctor_json("--data-dir", str(tmp_path / "none"))
    assert code == 0 and report["ok"]
    assert report["install"]["kind"] in ("editable", "source") and report["install"]["data"] == str(ROOT)
    assert all(item["present"] for item in report["shipped"])
    # make test installs the dev extra, which holds every other extra
    assert [e["name"] for e in report["extras"] if not e["installed"]] == []
    assert report["data_dir"] == {"path": str(tmp_path / "none"), "source": "--data-dir", "exists": False}
    assert report["knowledge"]["incident_db"] == {"state": "not built"}
    assert report["knowledge"]["kb"] == {"state": "not built"}
    assert not (tmp_path / "none").exists(), "doctor must not create the store it inspects"
    assert report["embedding"]["package"] and report["embedding"]["model_dir"]


def test_doctor_tells_a_built_db_from_a_stale_kb(data_dir: Path) -> None:
    # the session's store holds the seed DB and the index of a one-doc KB, not the shipped KB
    code, report = doctor_json("--data-dir", str(data_dir))
    assert code == 0
    db, kb = report["knowledge"]["incident_db"], report["knowledge"]["kb"]
    assert db["state"] == "built" and db["entries"] >= 100
    assert kb["state"].startswith("out of date") and kb["entries"] >= 1
    text = runner.invoke(app, ["doctor", "--data-dir", str(data_dir)]).stdout
    assert "aidai kb build --data-dir" in " ".join(text.split())


def test_doctor_names_a_missing_extra_and_how_to_add_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.metadata.version

    def version(name: str) -> str:
        if name == "openai":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(installation.importlib.metadata, "version", version)
    code, report = doctor_json("--data-dir", str(tmp_path))
    assert code == 0  # an extra limits some commands; the core still works
    llm = next(e for e in report["extras"] if e["name"] == "llm")
    assert not llm["installed"] and llm["missing"] == ["openai>=1.40"]
    assert all(e["installed"] for e in report["extras"] if e["name"] != "llm")
    text = " ".join(runner.invoke(app, ["doctor", "--data-dir", str(tmp_path)]).stdout.split())
    assert "missing openai>=1.40" in text and "pip install 'aidai[llm]'" in text


def test_doctor_fails_when_shipped_data_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shipped = installation.shipped_data()
    monkeypatch.setattr(installation, "shipped_data", lambda: {**shipped, "taxonomy": tmp_path / "gone.json"})
    code, report = doctor_json("--data-dir", str(tmp_path))
    assert code == 1 and not report["ok"]
    assert next(i for i in report["shipped"] if i["what"] == "taxonomy")["present"] is False


def test_missing_extra_names_the_extra() -> None:
    hint = installation.missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert hint is not None and "'kaiops' extra" in hint and "pip install 'aidai[kaiops]'" in hint
    hint = installation.missing_extra(ModuleNotFoundError("x", name="langgraph.checkpoint.postgres"))
    assert hint is not None and "aidai[server]" in hint
    assert installation.missing_extra(ModuleNotFoundError("x", name="yaml")) is None  # a core dependency: a bug
    assert installation.missing_extra(ImportError("x", name="torch")) is None


def test_a_pretriage_tool_without_its_extra_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> object:
        if name == "agent.kaiops.tool":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real(name, package)

    monkeypatch.setattr(pretriage.importlib, "import_module", import_module)
    with pytest.raises(ModuleNotFoundError, match=r"aidai\[kaiops\]"):
        pretriage._load(pretriage.TOOLS["kaiops"][1])
