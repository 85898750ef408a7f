"""The README and the docs site (issue 37): numbers come from the tables the benchmarks wrote, links resolve, the
reference pages are generated from the data they describe. `make test` also runs `mkdocs build --strict`."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SNIPPET = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$', re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def gen_pages() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def cited_tables(text: str) -> list[str]:
    return SNIPPET.findall(text)


# ---- numbers are generated: every table a page includes exists ----------------------------------------------------

def test_every_table_a_docs_page_includes_exists() -> None:
    cited = {(str(page.relative_to(ROOT)), path) for page in doc_pages() for path in cited_tables(page.read_text())}
    cited |= {(page, path) for page, text in generated_pages().items() for path in cited_tables(text)}
    assert cited, "the benchmark pages include the tables the benchmarks wrote"
    missing = [f"{page} cites {path}" for page, path in sorted(cited) if not (ROOT / path).is_file()]
    assert not missing, "docs pages cite table files that do not exist:\n" + "\n".join(missing)


def test_the_fault_lab_page_shows_every_table_the_lab_wrote() -> None:
    page = generated_pages()["benchmarks/l4-lab.md"]
    lab = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "eval" / "results").glob("l4-lab*.md"))
    assert cited_tables(page)[0] == "eval/results/l4-lab.md" and sorted(cited_tables(page)) == lab


def test_the_snippet_check_finds_a_missing_table() -> None:
    page = 'Intro.\n\n--8<-- "eval/results/no-such-bench.md"\n\n--8<-- "eval/results/l4.md"\n'
    assert cited_tables(page) == ["eval/results/no-such-bench.md", "eval/results/l4.md"]
    assert not (ROOT / "eval/results/no-such-bench.md").exists()


def generated_pages() -> dict[str, str]:
    return {path: make() for path, make in gen_pages().PAGES.items()}


def test_every_benchmark_table_file_is_on_a_docs_page() -> None:
    cited = {path for page in doc_pages() for path in cited_tables(page.read_text())}
    cited |= {path for text in generated_pages().values() for path in cited_tables(text)}
    tables = {str(p.relative_to(ROOT)) for p in (ROOT / "eval" / "results").glob("*.md")}
    assert tables - cited == set(), "a benchmark's table that no docs page shows"


def test_benchmark_pages_hold_no_hand_copied_table() -> None:
    """A benchmark page explains and includes; its tables are the included files', never typed in."""
    for page in sorted((DOCS / "benchmarks").glob("*.md")):
        rows = [line for line in page.read_text().splitlines() if line.startswith("|")]
        if page.name == "index.md":  # the index's table lists the benchmarks and their commands, no figure
            assert not [row for row in rows if re.search(r"\d\.\d", row)], "figures belong in the included files"
            continue
        assert rows == [], f"{page.name} has a typed table: include the benchmark's file instead"


# ---- the README ------------------------------------------------------------------------------------------------------

def test_readme_is_short_and_names_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text


def test_readme_tables_are_the_current_rows_of_the_files_they_name() -> None:
    module = gen_pages()
    text = README.read_text()
    markers = [line for line in text.splitlines() if module.MARKER.match(line)]
    assert markers, "the README's benchmark table names the file it comes from"
    assert module.sync_readme(text) == text, "README tables are stale: python docs/gen_pages.py --readme"


def test_readme_sync_replaces_a_stale_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = gen_pages()
    (tmp_path / "r.md").write_text("# r\n\n## T\n\n| a | b |\n|---|---|\n| x | 1 |\n| y | 2 |\n\nafter\n")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    stale = 'intro\n<!-- table from r.md after "## T" rows "| y" -->\n| a | b |\n|---|---|\n| y | 9 |\n\nend\n'
    assert module.sync_readme(stale) == ('intro\n<!-- table from r.md after "## T" rows "| y" -->\n'
                                         "| a | b |\n|---|---|\n| y | 2 |\n\nend\n")


def relative_links(text: str) -> list[str]:
    links = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        links.append(target.split("#", 1)[0])
    return links


def test_readme_relative_links_resolve() -> None:
    links = relative_links(README.read_text())
    assert "docs/index.md" in links
    broken = [link for link in links if not (ROOT / link).exists()]
    assert not broken, f"README links to missing files: {broken}"


def test_the_link_check_sees_a_broken_link() -> None:
    text = "[a](docs/index.md) [b](https://example.org/x) [c](#here) [d](docs/nope.md#part)"
    assert relative_links(text) == ["docs/index.md", "docs/nope.md"]


# ---- the generated reference pages ----------------------------------------------------------------------------------

def test_checks_catalogue_has_every_check_of_the_manifest() -> None:
    manifest = yaml.safe_load((ROOT / "verification_scripts" / "manifest.yaml").read_text())
    page = gen_pages().checks_page()
    for check in manifest["checks"]:
        assert f"\n## {check['id']} {{ #{check['id']} }}\n" in page
        assert f"verification_scripts/{check['script']}" in page
    assert f"{len(manifest['checks'])} checks:" in page


def test_checks_catalogue_follows_the_manifest() -> None:
    manifest = {"checks": [{"id": "new_probe", "script": "new_probe.py", "description": "a probe.", "tier": "active",
                            "nodes": ["GPU.MEMORY"], "needs": ["gpu", "idle_gpus"], "expected_cost_s": 42,
                            "timeout_s": 99, "compare": ["driver"], "events": True}]}
    page = gen_pages().checks_page(manifest)
    assert "1 checks: 0 passive" in page and "1 active" in page
    assert "| [`new_probe`](#new_probe) | active | gpu, idle_gpus | 42 | 99 | dated events | 1 |" in page
    assert "[`GPU.MEMORY`](taxonomy.md#gpu-memory)" in page and "`driver`" in page
    dump = {"checks": [{"id": "dump", "script": "dump.py", "description": "a dump.", "nodes": ["USER_APPLICATION"],
                        "job": True}]}
    page = gen_pages().checks_page(dump)
    assert "| its job | 1 |" in page and "**the incident's own job**" in page


def test_taxonomy_page_has_every_node_with_its_anchor() -> None:
    module = gen_pages()
    tree = json.loads((ROOT / "taxonomy" / "taxonomy.json").read_text())
    page = module.taxonomy_page()

    def labels(node: dict, prefix: str = "") -> list[str]:
        out = []
        for child in node.get("children", []):
            label = f"{prefix}{child['name']}"
            out += [label, *labels(child, label + ".")]
        return out

    all_labels = labels(tree)
    assert all_labels
    for label in all_labels:
        assert f" {label.rsplit('.', 1)[-1]} {{ #{module.anchor(label)} }}\n" in page
        assert f"`{label}`" in page or "." not in label
    leaves = [n for n in all_labels if not any(o.startswith(n + ".") for o in all_labels)]
    assert f"{len(leaves)} leaves" in page
    between = page.split("\n`INTERCONNECT_NETWORKING.GDR.GPUDIRECT_RDMA_DISABLED` (leaf)")[1].split("\n#")[0]
    assert "breaks only traffic between hosts" in between


def test_profiles_page_has_every_profile() -> None:
    profiles = yaml.safe_load((ROOT / "verification_scripts" / "profiles.yaml").read_text())
    page = gen_pages().profiles_page()
    for name in profiles:
        assert f"\n## {name} {{ #{name.lower()} }}\n" in page


# ---- the site's build ----------------------------------------------------------------------------------------------

def nav_files(nav: list) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += nav_files(value) if isinstance(value, list) else [value]
    return out


def test_nav_names_pages_that_exist_or_are_generated() -> None:
    class Loader(yaml.SafeLoader):  # mkdocs.yml names Python functions (!!python/name:...): read them as text
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    generated = set(gen_pages().PAGES)
    for page in nav_files(config["nav"]):
        assert (DOCS / page).is_file() or page in generated, page
    assert "agents.md" in nav_files(config["nav"]), "How a diagnosis works is in the nav"


def test_generated_images_come_from_the_benchmarks() -> None:
    for source in gen_pages().IMAGES.values():
        assert source.is_file() and source.is_relative_to(ROOT / "eval" / "results")


def test_screenshots_the_docs_show_exist() -> None:
    shown = {m for page in doc_pages() for m in re.findall(r"\]\((?:\.\./)*img/([^)]+)\)", page.read_text())}
    generated = {Path(p).name for p in gen_pages().IMAGES}
    assert "web-page.png" in shown
    for name in shown - generated:
        assert (DOCS / "img" / name).is_file(), f"docs/img/{name}: run make docs-shots"


def test_make_test_builds_the_docs_strictly() -> None:
    makefile = (ROOT / "Makefile").read_text()
    test_prereqs = re.search(r"^test:(.*)$", makefile, re.M)
    docs_recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert test_prereqs and " docs" in test_prereqs.group(1).split("#")[0]
    assert docs_recipe and "mkdocs build --strict" in docs_recipe.group(1)
