"""The Dagster UI in a real headless browser (Debian's chromium driven by Playwright): the webserver serves the
repository's workspace, the asset graph loads with the lineage from the weekly crawl to the evaluation, and a
release-window partition is launched from the materialise dialog; the run is then in the instance (queued: no
daemon runs here). Screenshots are saved (under $LOOKBENCH_UI_SCREENSHOTS when set, else the test's tmp dir)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--no-first-run", "--disable-dev-shm-usage"]
LINEAGE = ["weekly_products", "products", "image_refs", "images", "image_clusters", "contamination", "annotations",
           "release_candidate", "release", "evaluation"]

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(url: str, query: str) -> dict:
    req = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["data"]


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    if not os.path.isfile(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (`make chromium` installs it as root)")
    pytest.importorskip("playwright.sync_api")
    tmp = tmp_path_factory.mktemp("ui")
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump({
        "storage": {"sqlite": {"base_dir": str(home / "storage")}},
        "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"},
        "telemetry": {"enabled": False}}))
    site = yaml.safe_load((ROOT / "lookbench_pipeline/data/sites/demo.yaml").read_text())
    (tmp / "demo.yaml").write_text(yaml.safe_dump(site))
    (tmp / "pipeline.yaml").write_text(yaml.safe_dump({"data_dir": "data", "store": {"url": "store"},
                                                       "sites": ["demo.yaml"]}))
    env = {**os.environ, "DAGSTER_HOME": str(home), "LOOKBENCH_CONFIG": str(tmp / "pipeline.yaml"),
           "PYTHONWARNINGS": "ignore"}
    env.pop("LOOKBENCH_TIMEZONE", None)
    # the site partition the register_sites sensor would add (no daemon here)
    subprocess.run([sys.executable, "-c", "from dagster import DagsterInstance; "
                    "DagsterInstance.get().add_dynamic_partitions('sites', ['demo'])"], env=env, check=True,
                   cwd=ROOT, timeout=300)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "webserver.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster-webserver"), "-w", "workspace.yaml",
                             "-h", "127.0.0.1", "-p", str(port)], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError("dagster-webserver exited:\n" + (tmp / "webserver.log").read_text()[-3000:])
            try:
                data = _graphql(url, "{ workspaceOrError { ... on Workspace { locationEntries { name "
                                     "loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }")
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    errors = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
                    assert not errors, errors
                    break
            except (OSError, KeyError, TypeError):
                pass
            if time.time() > deadline:
                raise RuntimeError("the webserver did not load the workspace in 300 s")
            time.sleep(1)
        yield {"url": url, "home": home, "env": env}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def page(webserver):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        pg = browser.new_page(viewport={"width": 1600, "height": 1000})
        pg.set_default_timeout(120_000)
        yield pg
        browser.close()


def _shots(tmp_path) -> Path:
    d = Path(os.environ.get("LOOKBENCH_UI_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _dismiss_welcome(pg):
    time.sleep(2)
    skip = pg.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()


def _wait_for_names(pg, names, timeout_s=120):
    """Wait until every name is a line of the page's rendered text (graph nodes render their asset key)."""
    deadline = time.time() + timeout_s
    while True:
        lines = {ln.strip() for ln in pg.inner_text("body").splitlines()}
        missing = [n for n in names if n not in lines]
        if not missing:
            return
        if time.time() > deadline:
            raise AssertionError(f"not drawn after {timeout_s} s: {missing}")
        time.sleep(1)


def test_asset_graph_shows_lineage_from_crawl_to_evaluation(webserver, page, tmp_path):
    url = webserver["url"]
    # the graph as the webserver serves it: evaluation's upstream closure reaches the weekly crawl
    nodes = _graphql(url, "{ assetNodes { assetKey { path } dependencyKeys { path } } }")["assetNodes"]
    deps = {"/".join(n["assetKey"]["path"]): {"/".join(d["path"]) for d in n["dependencyKeys"]} for n in nodes}
    seen, todo = set(), ["evaluation"]
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo += deps.get(k, [])
    assert set(LINEAGE) <= seen

    # evaluation's upstream lineage, four levels: back to the weekly crawl partitions (groups expanded; visit it
    # before the global graph, whose collapsed groups the UI remembers)
    page.goto(f"{url}/assets/evaluation?view=lineage&lineageScope=upstream&lineageDepth=10",
              wait_until="domcontentloaded")
    page.get_by_text("Graph depth").wait_for()
    _dismiss_welcome(page)
    try:
        _wait_for_names(page, LINEAGE)  # every asset of the chain is drawn as a node
    finally:
        page.screenshot(path=str(_shots(tmp_path) / "lineage_crawl_to_evaluation.png"))
    shot = _shots(tmp_path) / "lineage_crawl_to_evaluation.png"
    assert shot.stat().st_size > 10_000

    page.goto(f"{url}/asset-groups", wait_until="domcontentloaded")  # the global asset graph, by group
    page.get_by_text("Global asset lineage").wait_for()
    _dismiss_welcome(page)
    _wait_for_names(page, ["crawl", "images", "dedup", "attributes", "release", "evaluate"])
    page.screenshot(path=str(_shots(tmp_path) / "asset_graph.png"))


def test_launch_a_release_window_partition_from_the_ui(webserver, page, tmp_path):
    from assets.partitions import release_partitions

    url = webserver["url"]
    page.goto(f"{url}/assets/drop_items", wait_until="domcontentloaded")
    page.get_by_role("button", name="Materialize…").first.wait_for()
    _dismiss_welcome(page)
    page.get_by_role("button", name="Materialize…").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Partition selection").wait_for()
    dialog.get_by_role("button", name="Latest", exact=True).click()
    launch = dialog.get_by_role("button", name="Launch 1 run")
    launch.wait_for()
    page.screenshot(path=str(_shots(tmp_path) / "launch_partition.png"))
    launch.click()
    dialog.wait_for(state="hidden")

    deadline = time.time() + 60
    runs = []
    while time.time() < deadline and not runs:
        runs = _graphql(url, "{ runsOrError { ... on Runs { results { runId status tags { key value } "
                             "assetSelection { path } } } } }")["runsOrError"]["results"]
        time.sleep(1)
    [run] = runs
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags["dagster/partition"] == release_partitions.get_last_partition_key()
    assert tags.get("dagster/from_ui") == "true"
    assert run["assetSelection"] == [{"path": ["drop_items"]}]
    assert run["status"] == "QUEUED"  # the queued run coordinator holds it: no daemon in this test

    # the same run, read from the instance the webserver writes to
    code = ("from dagster import DagsterInstance; import json; r = DagsterInstance.get().get_runs(); "
            "print(json.dumps([[x.run_id, x.status.value, x.tags.get('dagster/partition')] for x in r]))")
    out = subprocess.run([sys.executable, "-c", code], env=webserver["env"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[run["runId"], "QUEUED", tags["dagster/partition"]]]
