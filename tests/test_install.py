"""aidai installed like a tool: the sdist and the wheel carry everything the program reads, and the wheel, installed
into a fresh virtual environment, runs from a directory outside the checkout (issue 38).

The fresh environment gets aidai only from the wheel; its dependencies come from the project's own environment
through a plain `.pth` line (nothing is downloaded, and that environment's editable finder for the checkout is not
loaded: `.pth` files are read only in site directories, not in directories a `.pth` adds). The core commands also
run with every extra's modules made unimportable, so the core really needs none of them.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from agent import installation
from agent.checks.manifest import LIB_SCRIPTS, load_manifest
from agent.paths import DATA_FOLDERS, PACKAGE_DIR, ROOT

pytestmark = pytest.mark.slow
DEV_TEXTS = Path(__file__).parent / "fixtures" / "dev_incident_texts.jsonl"
SOURCES = ("agent", *DATA_FOLDERS, "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")
# the heavy modules of the extras; extras' modules that a core dependency brings anyway (uvicorn with chromadb,
# networkx with llama-index, threadpoolctl with scikit-learn) stay importable, as they would be on a core install
BLOCKED = ("torch", "transformers", "sentence_transformers", "dask", "distributed", "fastapi", "sse_starlette",
           "prometheus_client", "psycopg", "mcp", "openai", "pandas", "pyarrow")
BLOCKER = """
import importlib.abc, os, sys
_BLOCKED = set(filter(None, os.environ.get("AIDAI_TEST_BLOCK", "").split(",")))
class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
if _BLOCKED:
    sys.meta_path.insert(0, _Blocker())
"""


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist built from a copy of the checkout's sources, and the wheel built from that sdist (so the sdist is
    checked to hold what the wheel needs); nothing is written into the checkout."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=SKIP)
        else:
            shutil.copy2(source, src / name)
    env = {**os.environ, "PIP_NO_INDEX": "1"}
    done = run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check",
                "--outdir", str(work / "dist"), str(src)], work, env)
    assert done.returncode == 0, done.stdout + done.stderr
    (sdist,) = (work / "dist").glob("aidai-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(work / "unpacked", filter="data")
    (unpacked,) = (work / "unpacked").iterdir()
    done = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", str(work / "dist"), str(unpacked)], work, env)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (work / "dist").glob("aidai-*.whl")
    return {"sdist": sdist, "wheel": wheel, "work": work}


def wheel_name(path: Path) -> str:
    """Where a file of the checkout is in the wheel: the package as it is, the data folders under agent/_data."""
    rel = path.resolve().relative_to(ROOT)
    return rel.as_posix() if rel.parts[0] == "agent" else f"agent/_data/{rel.as_posix()}"


def checkout_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix != ".pyc")


def test_wheel_and_sdist_carry_the_data(built: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    expected = [p for folder in (PACKAGE_DIR, *(ROOT / f for f in DATA_FOLDERS)) for p in checkout_files(folder)]
    missing = [wheel_name(p) for p in expected if wheel_name(p) not in names]
    assert not missing, f"the wheel lacks {missing}"
    # every check's script and helper, by the manifest the program runs them from
    scripts = {spec.script for spec in load_manifest().checks} | set(LIB_SCRIPTS)
    assert {f"agent/_data/verification_scripts/{s}" for s in scripts} <= names
    with tarfile.open(built["sdist"]) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {p.resolve().relative_to(ROOT).as_posix() for p in expected} <= in_sdist


AUDIT = """
import json, sys
from pathlib import Path
ROOT, out, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
text = json.loads(Path(sys.argv[4]).read_text().splitlines()[0])["description"]  # the test's input, not a read
opened = set()
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, Path)):
        opened.add(str(Path(args[0] if not isinstance(args[0], bytes) else args[0].decode()).resolve()))
sys.addaudithook(hook)
from agent.cli.main import app
for args in (["checks", "list"], ["taxonomy", "show"], ["sim", "faults"], ["sim", "profiles"],
             ["demo", "--checks-only", "--directory", str(work / "demo-host")],
             ["diagnose", text, "--host", f"sim:{work / 'demo-host'}", "--no-history", "--data-dir",
              str(work / "data"), "--ticket", str(work / "ticket")],
             ["preflight", "--host", f"sim:{work / 'demo-host'}"]):
    try:
        app(args, prog_name="aidai")
    except SystemExit:
        pass
# what building the knowledge reads, without the minute of embedding it costs
from agent.knowledge import incident_db, kb_index
kb_index.load_passages(kb_index.KB_DIR)
incident_db.read_jsonl(incident_db.SEED_PATH)
from fastapi.testclient import TestClient
from agent.server.app import create_app
from agent.server.config import ServerConfig
with TestClient(create_app(ServerConfig(data_dir=str(work / "data")))) as client:
    for page in ("/", "/static/app.js", "/static/style.css"):
        assert client.get(page).status_code == 200, page
from agent.kaiops.checkpoint import SHIPPED
SHIPPED.read_bytes()
out.write_text(json.dumps(sorted(p for p in opened if p.startswith(str(ROOT) + "/"))))
"""


def test_every_file_read_at_run_time_is_in_the_wheel(built: dict[str, Path], tmp_path: Path) -> None:
    """The program's own reads, recorded by an audit hook while the core commands, the server page and the
    knowledge build's reads run from the checkout: each file of the checkout it opened is in the wheel."""
    driver = tmp_path / "audit.py"
    driver.write_text(AUDIT)
    out = tmp_path / "opened.json"
    done = run([sys.executable, str(driver), str(ROOT), str(out), str(tmp_path), str(DEV_TEXTS)], tmp_path,
               {**os.environ, "AIDAI_DATA_DIR": str(tmp_path / "data")}, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    opened = [Path(p) for p in json.loads(out.read_text())]
    reads = [p for p in opened if "__pycache__" not in p.parts and ".venv" not in p.parts]
    data_reads = [p for p in reads if p.relative_to(ROOT).parts[0] in DATA_FOLDERS]
    # the walk did reach the data: scripts and their helpers, the taxonomy, the seed DB, the KB, the web page
    for needed in ("verification_scripts/manifest.yaml", "verification_scripts/checklib.py",
                   "taxonomy/taxonomy.json", "knowledge/incidents/seed.jsonl", "agent/server/static/index.html",
                   "agent/kaiops/data/kaiops.pt"):
        assert ROOT / needed in reads, f"the walk never read {needed}"
    assert any("knowledge/kb/" in str(p) for p in data_reads)
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    missing = sorted({wheel_name(p) for p in reads} - names)
    assert not missing, f"read at run time but not in the wheel: {missing}"


@pytest.fixture(scope="module")
def fresh(built: dict[str, Path]) -> dict[str, object]:
    """A virtual environment holding aidai only as the wheel installs it."""
    venv = built["work"] / "venv"
    done = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], built["work"], dict(os.environ))
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    done = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                str(built["wheel"])], built["work"], dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    built["work"], dict(os.environ)).stdout.strip())
    (site / "zz_aidai_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "_aidai_test_block.py").write_text(BLOCKER)
    (site / "_aidai_test_block.pth").write_text("import _aidai_test_block\n")
    outside = built["work"] / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "AIDAI_DATA_DIR")}
    env.update({"AIDAI_DATA_DIR": str(outside / "data"), "AIDAI_MODEL_CACHE": str(outside / "models"),
                "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": "200"})
    return {"python": python, "aidai": venv / "bin" / "aidai", "cwd": outside, "env": env, "site": site}


def aidai(fresh: dict[str, object], *args: str, blocked: bool = False, timeout: float = 240,
          ) -> subprocess.CompletedProcess[str]:
    env = dict(fresh["env"])  # type: ignore[call-overload]
    if blocked:
        env["AIDAI_TEST_BLOCK"] = ",".join(BLOCKED)
    return run([str(fresh["aidai"]), *args], fresh["cwd"], env, timeout)  # type: ignore[arg-type]


def test_installed_package_is_the_wheel(fresh: dict[str, object]) -> None:
    code = "import agent, agent.paths as p, importlib.metadata as m; print(agent.__file__, p.INSTALLED, " \
           "p.SCRIPTS_DIR, m.version('aidai'))"
    done = run([str(fresh["python"]), "-c", code], fresh["cwd"], fresh["env"])  # type: ignore[arg-type]
    assert done.returncode == 0, done.stderr
    module, installed, scripts, version = done.stdout.split()
    assert Path(module).is_relative_to(fresh["site"]), f"agent imported from {module}, not the wheel"  # type: ignore[arg-type]
    assert installed == "True" and Path(scripts).is_relative_to(fresh["site"])  # type: ignore[arg-type]
    assert aidai(fresh, "--version").stdout.strip() == f"aidai {version}"


def test_core_commands_run_outside_the_checkout_without_extras(fresh: dict[str, object]) -> None:
    done = aidai(fresh, "checks", "list", "--json", blocked=True)
    assert done.returncode == 0, done.stderr
    assert {c["id"] for c in json.loads(done.stdout)} == {c.id for c in load_manifest().checks}

    done = aidai(fresh, "taxonomy", "show", blocked=True)
    assert done.returncode == 0, done.stderr
    assert "GPU.MEMORY.UNCORRECTABLE_ECC" in done.stdout and "INTERCONNECT_NETWORKING.NVLINK" in done.stdout

    text = json.loads(DEV_TEXTS.read_text().splitlines()[0])["description"]
    done = aidai(fresh, "diagnose", text, "--host", "local", blocked=True)
    gpu_here = Path("/proc/driver/nvidia").exists() or any(Path("/dev").glob("nvidia[0-9]*"))
    if gpu_here:  # a GPU machine can be checked: the run must still end with a report, never a traceback
        assert done.returncode in (0, 1), done.stderr
    else:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "could not check local" in " ".join((done.stdout + done.stderr).split()).lower()
    assert "Traceback" not in done.stderr

    done = aidai(fresh, "demo", "--checks-only", "--directory", "demo-host", blocked=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nvlink_status" in done.stdout.split("checks that FAIL", 1)[1].splitlines()[0]

    # the simulated host of the demo, diagnosed: inventory, preflight's known-bad lists, the checks, the report
    done = aidai(fresh, "diagnose", text, "--host", "sim:demo-host", "--no-history", "--json", blocked=True)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["checks_run"] > 0
    assert [t["status"] for t in report["details"]["pretriage"] if t["tool"] == "preflight"] == ["ok"]
    assert "LINK_HARDWARE_FAULT" in done.stdout

    done = aidai(fresh, "serve", "--port", "1", blocked=True)
    assert done.returncode == 2 and "aidai[server]" in done.stderr, done.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_answers_its_page(fresh: dict[str, object]) -> None:
    port = free_port()
    log = Path(str(fresh["cwd"])) / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen([str(fresh["aidai"]), "serve", "--port", str(port)], cwd=fresh["cwd"],
                                  env=fresh["env"], stdout=sink, stderr=subprocess.STDOUT)  # type: ignore[arg-type]
    try:
        deadline, page = time.monotonic() + 120, ""
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    page = response.read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert "<title>aidai" in page, log.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/static/app.js", timeout=10) as response:
            assert response.status == 200
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)


def test_doctor_in_the_installed_package(fresh: dict[str, object]) -> None:
    done = aidai(fresh, "doctor", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["install"]["kind"] == "package"
    assert Path(report["install"]["data"]).is_relative_to(fresh["site"])  # type: ignore[arg-type]
    assert all(item["present"] for item in report["shipped"])
    assert report["data_dir"]["path"] == fresh["env"]["AIDAI_DATA_DIR"]  # type: ignore[index]

    done = aidai(fresh, "doctor", blocked=True)
    assert done.returncode == 0, done.stdout + done.stderr
    flat = " ".join(done.stdout.split())
    for extra in ("server", "mcp", "kaiops", "reveal", "llm"):
        assert f"aidai[{extra}" in flat or f",{extra}" in flat, flat
    assert "installed as: installed package" in flat


def test_first_query_prepares_the_embedding_model_once(fresh: dict[str, object]) -> None:
    code = textwrap.dedent("""
        from agent.knowledge.embeddings import embed, onnx_path
        assert onnx_path() is None
        print(embed(["NCCL WARN Connect failed"]).shape, onnx_path())
    """)
    env = dict(fresh["env"])  # type: ignore[call-overload]
    env["AIDAI_MODEL_CACHE"] = str(Path(str(fresh["cwd"])) / "models-first")
    env["AIDAI_TEST_BLOCK"] = ",".join(BLOCKED)  # no torch, no transformers: onnx and numpy write the graph
    done = run([str(fresh["python"]), "-c", code], fresh["cwd"], env)  # type: ignore[arg-type]
    assert done.returncode == 0, done.stderr
    assert "(1, 384)" in done.stdout and "models-first" in done.stdout
    assert "preparing the embedding model once" in done.stderr


def test_only_checkout_tools_reach_for_the_checkout() -> None:
    """Code run by an installed aidai finds its data through agent.paths' RESOURCES (the package's data or the
    checkout's folders), never through ROOT, which is only the checkout: `aidai eval` (its harness lives in the
    repository) and the simulator's self-test (tests and benchmarks) are the only users."""
    users = []
    for module in PACKAGE_DIR.rglob("*.py"):
        tree = ast.parse(module.read_text(), filename=str(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "agent.paths" and \
                    any(alias.name == "ROOT" for alias in node.names):
                users.append(module.relative_to(PACKAGE_DIR).as_posix())
    assert sorted(users) == ["cli/eval_cmd.py", "sim/selftest.py"]


def test_extras_agree_with_the_metadata() -> None:
    """Each extra the code names is declared in pyproject.toml, and each of its modules comes from one of that
    extra's requirements (so the hint for a missing module names the extra that brings it)."""
    from importlib.metadata import metadata, packages_distributions, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    declared = set(metadata("aidai").get_all("Provides-Extra") or [])
    providers = packages_distributions()
    for extra in installation.EXTRAS:
        assert extra.name in declared
        names = set()
        for line in requires("aidai") or []:
            req = Requirement(line)
            if req.marker and req.marker.evaluate({"extra": extra.name}) and not req.marker.evaluate({"extra": ""}):
                names |= {canonicalize_name(req.name), *(canonicalize_name(e) for e in req.extras)}
        for module in extra.modules:
            dists = {canonicalize_name(d) for d in providers.get(module.partition(".")[0], [])}
            assert dists & names, f"{module} ({dists}) is not brought by aidai[{extra.name}] ({names})"
    assert "dev" in declared
