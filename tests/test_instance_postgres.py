"""The Dagster instance on a real PostgreSQL server (Debian's ``postgresql``, a temporary cluster the test starts):
deploy/dagster.postgres.yaml loads, a partition materialises into PostgreSQL, the run queue keeps one release run
at a time and one crawl per site, and the vLLM pool admits no more steps than its limit."""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user() -> list[str]:
    """PostgreSQL refuses to run as root: run its programs as the postgres (or nobody) user when we are root."""
    if os.geteuid() != 0:
        return []
    import pwd

    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        if shutil.which("runuser"):
            return ["runuser", "-u", user, "--"]
    pytest.skip("running as root and neither runuser nor a postgres/nobody user is available")


@pytest.fixture(scope="module")
def postgres():
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL server binaries (Debian package postgresql) not installed; `make postgresql`")
    pytest.importorskip("psycopg2")
    pytest.importorskip("dagster_postgres")
    prefix = _as_user()
    base = Path(tempfile.mkdtemp(prefix="lookbench-pg-"))
    base.chmod(0o755)
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if prefix:
        subprocess.run(["chown", "-R", prefix[2], str(base)], check=True)
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    subprocess.run([*prefix, initdb, "-D", str(data), "-U", "lookbench", "--auth=trust", "-E", "UTF8"], check=True,
                   capture_output=True, env=env)
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "60", "-o",
                    f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off", "start"], check=True,
                   capture_output=True, env=env)
    try:
        import psycopg2

        deadline = time.time() + 30
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=port, user="lookbench", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.time() > deadline:
                    raise
                time.sleep(0.3)
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE dagster")
        conn.close()
        yield {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(port), "DAGSTER_PG_USER": "lookbench",
               "DAGSTER_PG_PASSWORD": "trust-auth-ignores-it", "DAGSTER_PG_DB": "dagster"}
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "stop"], capture_output=True, env=env)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_instance(postgres, tmp_path, monkeypatch):
    from dagster import DagsterInstance

    for k, v in postgres.items():
        monkeypatch.setenv(k, v)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = DagsterInstance.get()
    yield instance
    instance.dispose()


def _sql(postgres, query):
    import psycopg2

    with psycopg2.connect(host=postgres["DAGSTER_PG_HOST"], port=int(postgres["DAGSTER_PG_PORT"]),
                          user="lookbench", dbname="dagster") as conn, conn.cursor() as cur:
        cur.execute(query)
        return cur.fetchall()


def test_instance_stores_runs_and_materialisations_in_postgres(pg_instance, postgres, demo_config):
    from dagster import materialize
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    from assets.definitions import ALL_ASSETS, ALL_CHECKS
    from assets.io import TableIOManager
    from assets.resources import LookbenchConfig

    assert isinstance(pg_instance.run_storage, PostgresRunStorage)
    assert isinstance(pg_instance.event_log_storage, PostgresEventLogStorage)
    assert isinstance(pg_instance.schedule_storage, PostgresScheduleStorage)
    res = materialize([*ALL_ASSETS, *ALL_CHECKS], selection=["drop_items"], partition_key="2026-07-01",
                      instance=pg_instance,
                      resources={"lookbench": LookbenchConfig(config_path=str(demo_config)),
                                 "io_manager": TableIOManager(config_path=str(demo_config))})
    assert res.success
    [(status,)] = _sql(postgres, f"SELECT status FROM runs WHERE run_id = '{res.run_id}'")
    assert status == "SUCCESS"
    rows = _sql(postgres, "SELECT asset_key, partition FROM event_logs WHERE dagster_event_type = "
                          f"'ASSET_MATERIALIZATION' AND run_id = '{res.run_id}'")
    assert [(k, p) for k, p in rows] == [('["drop_items"]', "2026-07-01")]
    checks = _sql(postgres, "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_CHECK_EVALUATION' "
                            f"AND run_id = '{res.run_id}'")
    assert checks[0][0] == 1  # drop_items' schema check ran with it


def _queued(instance, job, tags):
    """A queued run as the UI or a schedule submits it (its job's origin is the code location)."""
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    origin = RemoteJobOrigin(RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("assets.definitions"),
                                                    "__repository__"), job)
    run = DagsterRun(job_name=job, run_id=str(uuid.uuid4()), status=DagsterRunStatus.QUEUED, tags=tags,
                     remote_job_origin=origin)
    instance.add_run(run)
    return run.run_id


def test_run_queue_one_release_at_a_time_and_one_crawl_per_site(pg_instance):
    from dagster._core.run_coordinator import QueuedRunCoordinator
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from assets.schedules import CRAWL_TAGS, RELEASE_TAGS

    assert isinstance(pg_instance.run_coordinator, QueuedRunCoordinator)
    r1 = _queued(pg_instance, "release_job", {**RELEASE_TAGS, "lookbench/window": "2026-01-01"})
    r2 = _queued(pg_instance, "release_job", {**RELEASE_TAGS, "lookbench/window": "2026-07-01"})
    a1 = _queued(pg_instance, "crawl_job", {**CRAWL_TAGS, "lookbench/site": "shop-a"})
    a2 = _queued(pg_instance, "crawl_job", {**CRAWL_TAGS, "lookbench/site": "shop-a"})
    b1 = _queued(pg_instance, "crawl_job", {**CRAWL_TAGS, "lookbench/site": "shop-b"})
    daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
    picked = {r.run_id for r in daemon._get_runs_to_dequeue(pg_instance, pg_instance.get_concurrency_config(),
                                                             None)}
    assert picked == {r1, a1, b1}, "one release, one crawl per site; the rest waits"
    assert r2 not in picked and a2 not in picked


def test_vllm_pool_admits_no_more_steps_than_its_limit(pg_instance):
    from dagster._core.storage.event_log.base import ConcurrencyClaimStatus  # noqa: F401  (the claim's type)

    from assets.partitions import VLLM_POOL

    storage = pg_instance.event_log_storage
    storage.set_concurrency_slots(VLLM_POOL, 2)
    run_id = str(uuid.uuid4())
    claims = [storage.claim_concurrency_slot(VLLM_POOL, run_id, f"annotate_{i}") for i in range(3)]
    assert [c.is_claimed for c in claims] == [True, True, False]
    info = storage.get_concurrency_info(VLLM_POOL)
    assert info.slot_count == 2 and len(info.claimed_slots) == 2 and len(info.pending_steps) == 3
    storage.free_concurrency_slot_for_step(run_id, "annotate_0")
    assert storage.claim_concurrency_slot(VLLM_POOL, run_id, "annotate_2").is_claimed
