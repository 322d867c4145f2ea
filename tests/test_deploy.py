"""The deployment configuration in deploy/ loads and is what its consumers accept, offline: the Helm values have
the Dagster chart's keys and render to instance settings that dagster-k8s / dagster-aws / Dagster validate; the
executor run configs pass the release and crawl jobs' config schema with the Kubernetes executor; the Kubernetes
manifests (vLLM server, storage) round-trip through the official Kubernetes models without losing a field."""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"

pytest.importorskip("dagster_k8s")
pytest.importorskip("dagster_aws")

# Top-level sections of the Dagster chart's values (DagsterHelmValues in dagster-io/dagster
# helm/dagster/schema/schema/charts/dagster/values.py) and the keys of the sections we set.
CHART_SECTIONS = {"dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
                  "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
                  "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox",
                  "migrate", "telemetry", "serviceAccount", "global", "retention", "concurrency",
                  "additionalInstanceConfig"}
K8S_RUN_LAUNCHER_KEYS = {"image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile",
                         "envConfigMaps", "envSecrets", "envVars", "volumeMounts", "volumes", "labels",
                         "failPodOnRunFailure", "resources", "schedulerName", "securityContext", "runK8sConfig"}
USER_DEPLOYMENT_KEYS = {"name", "image", "port", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns",
                        "env", "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations",
                        "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe",
                        "startupProbe", "labels", "volumeMounts", "volumes", "schedulerName"}
POSTGRESQL_KEYS = {"postgresqlScheme", "image", "enabled", "postgresqlHost", "postgresqlUsername",
                   "postgresqlPassword", "postgresqlDatabase", "postgresqlParams", "service"}
S3_CLM_KEYS = {"localDir", "prefix", "useSsl", "verify", "verifyCertPath", "endpointUrl", "skipEmptyFiles",
               "uploadInterval", "uploadExtraArgs", "showUrlOnly", "region", "bucket"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _snake_keys(obj):
    """camelCase chart values -> the snake_case config the chart's templates write into dagster.yaml."""
    if isinstance(obj, dict):
        return {_snake(k): _snake_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_snake_keys(v) for v in obj]
    return obj


def _k8s_names(items):
    return [i["name"] if isinstance(i, dict) else i for i in items]


@pytest.fixture(scope="module")
def values():
    return yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())


def test_every_deploy_file_parses():
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert {f.relative_to(DEPLOY).as_posix() for f in files} >= {
        "helm/values.yaml", "executor.yaml", "crawl_executor.yaml", "vllm.yaml", "storage.yaml",
        "dagster.postgres.yaml"}
    for f in files:
        docs = list(yaml.safe_load_all(f.read_text()))
        assert docs and all(isinstance(d, dict) for d in docs), f


def test_helm_values_have_the_keys_the_dagster_chart_expects(values):
    assert set(values) <= CHART_SECTIONS, set(values) - CHART_SECTIONS
    rl = values["runLauncher"]
    assert rl["type"] == "K8sRunLauncher" and set(rl["config"]) == {"k8sRunLauncher"}
    assert set(rl["config"]["k8sRunLauncher"]) <= K8S_RUN_LAUNCHER_KEYS
    clm = values["computeLogManager"]
    assert clm["type"] == "S3ComputeLogManager" and set(clm["config"]) == {"s3ComputeLogManager"}
    assert set(clm["config"]["s3ComputeLogManager"]) <= S3_CLM_KEYS and clm["config"]["s3ComputeLogManager"]["bucket"]
    assert set(values["postgresql"]) <= POSTGRESQL_KEYS and values["postgresql"]["enabled"] is False
    assert values["dagsterDaemon"]["runCoordinator"]["type"] == "QueuedRunCoordinator"
    assert set(values["dagsterDaemon"]["runMonitoring"]) <= {
        "enabled", "startTimeoutSeconds", "cancelTimeoutSeconds", "maxResumeRunAttempts", "pollIntervalSeconds",
        "freeSlotsAfterRunEndSeconds"}
    assert set(values["pythonLogs"]) <= {"pythonLogLevel", "managedPythonLoggers", "dagsterHandlerConfig"}
    assert set(values["concurrency"]) <= {"enabled", "pools", "runs"}
    assert set(values["concurrency"]["pools"]) <= {"defaultLimit", "granularity", "opGranularityRunBuffer"}
    assert set(values["concurrency"]["runs"]) <= {"maxConcurrentRuns", "tagConcurrencyLimits"}
    ud = values["dagster-user-deployments"]
    assert ud["enabled"] and ud["deployments"]
    for d in ud["deployments"]:
        assert set(d) <= USER_DEPLOYMENT_KEYS and {"name", "image", "port"} <= set(d)
        assert {"repository", "tag", "pullPolicy"} <= set(d["image"])
        args = d["dagsterApiGrpcArgs"]
        module, attr = args[args.index("-m") + 1], args[args.index("-a") + 1]
        import importlib

        from dagster import Definitions

        assert isinstance(getattr(importlib.import_module(module), attr), Definitions)
    # the same volume and config everywhere the code runs
    launcher = rl["config"]["k8sRunLauncher"]
    assert _k8s_names(launcher["volumes"]) == _k8s_names(ud["deployments"][0]["volumes"])
    assert "LOOKBENCH_EXECUTOR=k8s" in launcher["envVars"]


def test_rendered_instance_settings_pass_dagsters_schemas(values, tmp_path):
    """What the chart writes into dagster.yaml, validated by the classes that read it."""
    from dagster._config import validate_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster_aws.s3.compute_log_manager import S3ComputeLogManager
    from dagster_k8s.launcher import K8sRunLauncher

    launcher = _snake_keys(values["runLauncher"]["config"]["k8sRunLauncher"])
    launcher["env_config_maps"] = _k8s_names(launcher["env_config_maps"])
    launcher["env_secrets"] = _k8s_names(launcher["env_secrets"])
    # what the chart's template adds from its own release (release "lookbench" -> "lookbench-dagster-*")
    launcher.update({"instance_config_map": "lookbench-dagster-instance", "dagster_home": "/opt/dagster/dagster_home",
                     "postgres_password_secret": values["global"]["postgresqlSecretName"],
                     "service_account_name": "lookbench-dagster"})
    res = validate_config(K8sRunLauncher.config_type(), launcher)
    assert res.success, [e.message for e in res.errors]
    clm = _snake_keys(values["computeLogManager"]["config"]["s3ComputeLogManager"])
    res = validate_config(S3ComputeLogManager.config_type(), clm)
    assert res.success, [e.message for e in res.errors]

    conc = values["concurrency"]
    runs = conc["runs"]
    instance = {
        "storage": {"postgres": {"postgres_db": {
            "hostname": values["postgresql"]["postgresqlHost"], "username": values["postgresql"]["postgresqlUsername"],
            "password": {"env": "DAGSTER_PG_PASSWORD"}, "db_name": values["postgresql"]["postgresqlDatabase"],
            "port": values["postgresql"]["service"]["port"], "scheme": values["postgresql"]["postgresqlScheme"],
            "params": values["postgresql"]["postgresqlParams"]}}},
        "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator",
                            "config": {"dequeue_interval_seconds": values["dagsterDaemon"]["runCoordinator"]["config"][
                                "queuedRunCoordinator"]["dequeueIntervalSeconds"]}},
        "run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": launcher},
        "compute_logs": {"module": "dagster_aws.s3.compute_log_manager", "class": "S3ComputeLogManager",
                         "config": clm},
        "concurrency": {"runs": {"max_concurrent_runs": runs["maxConcurrentRuns"],
                                 "tag_concurrency_limits": runs["tagConcurrencyLimits"]},
                        "pools": _snake_keys(conc["pools"])},
        "python_logs": {"python_log_level": values["pythonLogs"]["pythonLogLevel"],
                        "managed_python_loggers": values["pythonLogs"]["managedPythonLoggers"]},
        "telemetry": {"enabled": False},
        "run_monitoring": _snake_keys(values["dagsterDaemon"]["runMonitoring"]),
    }
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance))
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["run_monitoring"]["enabled"] is True  # a run whose pod died does not hold the release slot
    assert config["concurrency"]["runs"]["tag_concurrency_limits"][0] == {"key": "lookbench/job",
                                                                          "value": "release", "limit": 1}
    # the same limits as the PostgreSQL instance file the tests run on a real server
    pg = yaml.safe_load((DEPLOY / "dagster.postgres.yaml").read_text())
    assert pg["concurrency"]["runs"]["tag_concurrency_limits"] == runs["tagConcurrencyLimits"]


@pytest.mark.parametrize("job_name,run_config_file", [("release_job", "executor.yaml"),
                                                      ("crawl_job", "crawl_executor.yaml")])
def test_executor_run_config_passes_the_jobs_schema_on_kubernetes(job_name, run_config_file, monkeypatch):
    from dagster import validate_run_config
    from dagster_k8s import k8s_job_executor

    from assets.definitions import build_defs

    monkeypatch.setenv("LOOKBENCH_EXECUTOR", "k8s")
    job = build_defs().resolve_job_def(job_name)
    assert job.executor_def is k8s_job_executor
    run_config = yaml.safe_load((DEPLOY / run_config_file).read_text())
    validate_run_config(job, run_config)  # raises DagsterInvalidConfigError on any unknown or mistyped key
    steps = set(run_config["execution"]["config"]["per_step_k8s_config"])
    assert steps <= {n.name for n in job.nodes}, steps - {n.name for n in job.nodes}


def test_unknown_executor_is_refused(monkeypatch):
    from assets.definitions import build_defs

    monkeypatch.setenv("LOOKBENCH_EXECUTOR", "celery")
    with pytest.raises(ValueError, match="LOOKBENCH_EXECUTOR"):
        build_defs()


def _roundtrip(doc: dict) -> dict:
    """``doc`` deserialised into the official Kubernetes model of its kind and serialised back."""
    from kubernetes.client import ApiClient

    api = ApiClient()

    class _R:
        data = json.dumps(doc)

    obj = api.deserialize(_R(), f"V1{doc['kind']}")
    return api.sanitize_for_serialization(obj)


def _normalise(x):
    if isinstance(x, dict):
        return {k: _normalise(v) for k, v in x.items() if v not in (None, [], {})}
    if isinstance(x, list):
        return [_normalise(v) for v in x]
    return str(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x


@pytest.mark.parametrize("name", ["vllm.yaml", "storage.yaml"])
def test_kubernetes_manifests_keep_every_field_in_the_official_models(name):
    for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
        assert _normalise(_roundtrip(doc)) == _normalise(doc), f"{name} {doc['kind']}: a field the model lacks"


def test_vllm_serves_qwen25_vl_72b_on_four_gpus():
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "vllm.yaml").read_text())}
    pod = docs["Deployment"]["spec"]["template"]
    [c] = pod["spec"]["containers"]
    assert c["command"] == ["vllm", "serve", "Qwen/Qwen2.5-VL-72B-Instruct"]
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"])
    tp = int(args["tensor-parallel-size"])
    assert tp == 4 and int(c["resources"]["limits"]["nvidia.com/gpu"]) == tp
    assert json.loads(args["limit-mm-per-prompt"])["image"] >= 1
    assert 4096 <= int(args["max-model-len"]) <= 32768  # Qwen2.5-VL's context is 32k (128k with YaRN)
    svc = docs["Service"]
    assert svc["spec"]["selector"] == pod["metadata"]["labels"]
    assert svc["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]


def test_deploy_doc_explains_every_file():
    doc = (ROOT / "docs" / "DEPLOY.md").read_text()
    for f in ("helm/values.yaml", "executor.yaml", "crawl_executor.yaml", "vllm.yaml", "storage.yaml",
              "dagster.postgres.yaml", "Dockerfile"):
        assert f in doc, f
