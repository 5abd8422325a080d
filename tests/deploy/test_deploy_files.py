"""The deployment files agree with the code and with each other: every YAML parses, the
SparkApplication carries the state store provider and metrics port the code uses, its ConfigMap
(and the container's config) pass ``streaming.config.load``, the Dockerfile has the instructions
a user relies on, the shell scripts pass ``bash -n`` (and shellcheck where installed), and the
submit script builds the right spark-submit command or names the missing flag and its fix."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pyspark
import pytest
import yaml

from streaming import config
from streaming.spark.session import DEFAULTS, ROCKSDB_PROVIDER

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SUBMIT = DEPLOY / "spark-submit" / "epochwatch-submit.sh"
DRIVER_FILE = DEPLOY / "spark-submit" / "epochwatch_driver.py"
DOCKERFILE = DEPLOY / "container" / "Dockerfile"
MANIFEST = DEPLOY / "kubernetes" / "sparkapplication.yaml"
METRICS_PORT = config.SinkSettings().metrics_port
SCRIPTS = [SUBMIT, DEPLOY / "container" / "spark-entrypoint.sh", DEPLOY / "local" / "dev"]
# The containers the Spark operator names in the pod templates it hands to spark-submit
# (spark.kubernetes.{driver,executor}.podTemplateContainerName).
SPARK_CONTAINERS = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}


def test_every_yaml_file_in_deploy_parses():
    files = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])
    assert MANIFEST in files and len(files) >= 8
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs and all(isinstance(d, dict) for d in docs), path


# --- Kubernetes --------------------------------------------------------------------------------

def manifest() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one object per kind"
    return by_kind


def test_sparkapplication_has_the_required_fields():
    app = manifest()["SparkApplication"]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    for key in ("type", "mode", "image", "mainApplicationFile", "arguments", "sparkConf", "restartPolicy",
                "driver", "executor", "sparkVersion"):
        assert key in spec, key
    assert (spec["type"], spec["mode"]) == ("Python", "cluster")
    policy = spec["restartPolicy"]
    assert policy["type"] in ("Always", "OnFailure")
    assert policy["onFailureRetries"] > 0 and policy["onFailureRetryInterval"] > 0
    assert policy["onSubmissionFailureRetries"] > 0 and policy["onSubmissionFailureRetryInterval"] > 0
    for role in ("driver", "executor"):
        assert spec[role]["cores"] >= 1 and re.fullmatch(r"\d+[gm]", spec[role]["memory"]), role
        assert re.fullmatch(r"\d+[gm]", spec[role]["memoryOverhead"]), role
    assert spec["executor"]["instances"] >= 1


def test_sparkapplication_uses_the_codes_state_store_and_port():
    objects = manifest()
    spec = objects["SparkApplication"]["spec"]
    conf = spec["sparkConf"]
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert int(conf["spark.sql.shuffle.partitions"]) >= 1
    assert conf["spark.python.daemon.module"] == DEFAULTS["spark.python.daemon.module"]
    for role in ("driver", "executor"):
        assert conf[f"spark.{role}.extraJavaOptions"] == DEFAULTS[f"spark.{role}.extraJavaOptions"]
    assert [p["containerPort"] for p in container(spec, "driver")["ports"]] == [METRICS_PORT]
    service = objects["Service"]
    assert service["spec"]["selector"]["spark-role"] == "driver"
    app_name = objects["SparkApplication"]["metadata"]["name"]
    assert service["spec"]["selector"]["sparkoperator.k8s.io/app-name"] == app_name
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(METRICS_PORT, "metrics")]
    notes = service["metadata"]["annotations"]
    assert (notes["prometheus.io/scrape"], notes["prometheus.io/port"], notes["prometheus.io/path"]) == (
        "true", str(METRICS_PORT), "/metrics")


def test_sparkapplication_runs_the_driver_file_shipped_in_the_image():
    spec = manifest()["SparkApplication"]["spec"]
    in_image = spec["mainApplicationFile"].removeprefix("local://")
    assert spec["mainApplicationFile"].startswith("local:///")
    assert image_copies()[in_image] == str(DRIVER_FILE.relative_to(ROOT))
    assert f'IMAGE_DRIVER_FILE="{spec["mainApplicationFile"]}"' in SUBMIT.read_text()


def container(spec: dict, role: str) -> dict:
    """The Spark container of the role's pod template (the name the operator gives Spark)."""
    [spark] = [c for c in spec[role]["template"]["spec"]["containers"] if c["name"] == SPARK_CONTAINERS[role]]
    return spark


def pod_volumes(spec: dict, role: str) -> dict[str, dict]:
    return {v["name"]: v for v in spec[role]["template"]["spec"].get("volumes", [])}


def _mounts(spec: dict, role: str) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container(spec, role).get("volumeMounts", [])}


def test_configmap_config_loads_with_the_secrets_as_environment(monkeypatch, tmp_path):
    objects = manifest()
    spec = objects["SparkApplication"]["spec"]
    secret = objects["Secret"]
    text = objects["ConfigMap"]["data"]["epochwatch.yaml"]
    live = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    refs = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)\}", live))   # the commented ones: the test below
    assert refs and refs <= set(secret["stringData"]), "every ${NAME} of the config comes from the Secret"
    for role in ("driver", "executor"):
        assert {"secretRef": {"name": secret["metadata"]["name"]}} in container(spec, role)["envFrom"], role
    for name in refs:
        monkeypatch.setenv(name, "from-the-secret")
    path = tmp_path / "epochwatch.yaml"
    path.write_text(text)
    args = spec["arguments"]
    overrides = dict(a.split("=", 1) for a in args[args.index("--set") + 1::2])
    settings = config.load(path, overrides)
    assert settings.kafka.client["sasl.password"] == "from-the-secret"
    assert (settings.sinks.metrics_port, settings.sinks.metrics_address) == (METRICS_PORT, "0.0.0.0")
    assert len(settings.sinks.alertmanager_urls()) == 2, "each instance of the HA Alertmanager, by its pod's name"
    # the config file is where the ConfigMap is mounted on the driver
    volumes = pod_volumes(spec, "driver")
    config_volume = next(n for n, v in volumes.items() if v.get("configMap", {}).get("name")
                         == objects["ConfigMap"]["metadata"]["name"])
    assert args[args.index("--config") + 1] == f"{_mounts(spec, 'driver')[config_volume]}/epochwatch.yaml"


def uncommented(text: str, *words: str) -> str:
    """``text`` with the commented lines holding any of ``words`` made live (what a user does)."""
    return "\n".join(re.sub(r"^(\s*)# ", r"\1", line) if line.lstrip().startswith("# ") and
                     any(w in line for w in words) else line for line in text.splitlines()) + "\n"


def test_schema_registry_credentials_shown_from_the_secret(monkeypatch, tmp_path):
    """The registry keys commented in the ConfigMap and the Secret's key commented with them: made
    live, the config loads with the Secret's value, under the variable the example config names."""
    text = MANIFEST.read_text()
    live = uncommented(text, "schema.registry.", "EPOCHWATCH_REGISTRY_AUTH")
    objects = {o["kind"]: o for o in yaml.safe_load_all(live) if o}
    example = (DEPLOY / "config" / "epochwatch.yaml").read_text()
    [variable] = re.findall(r"schema\.registry\.basic\.auth\.user\.info: \$\{([A-Z_]+)\}", example)
    config_text = objects["ConfigMap"]["data"]["epochwatch.yaml"]
    assert f"schema.registry.basic.auth.user.info: ${{{variable}}}" in config_text
    secret = objects["Secret"]["stringData"]
    assert variable in secret and ":" in secret[variable], "USER:PASSWORD, from the Secret every pod gets as env"
    for name, value in secret.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "epochwatch.yaml"
    path.write_text(config_text)
    kafka = config.load(path).kafka
    assert kafka.schema_registry_url.startswith("https://")
    assert kafka.registry_conf() == {"basic.auth.user.info": secret[variable]}
    assert variable not in manifest()["Secret"]["stringData"], "optional: commented until a registry is used"


def test_checkpoint_is_on_the_claim_mounted_by_driver_and_executors_with_s3_shown():
    objects = manifest()
    spec = objects["SparkApplication"]["spec"]
    args = spec["arguments"]
    checkpoint = next(a.split("=", 1)[1] for a in args if a.startswith("checkpoint_location="))
    claim = objects["PersistentVolumeClaim"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    for role in ("driver", "executor"):
        volume = next(n for n, v in pod_volumes(spec, role).items()
                      if v.get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"])
        assert checkpoint.startswith(f"file://{_mounts(spec, role)[volume]}/"), role
    for scheme in ("s3a", "gs"):
        assert re.search(rf"#\s*- checkpoint_location={scheme}://", MANIFEST.read_text()), scheme


# What the operator's mutating webhook adds to a pod, and the operator itself never does
# (kubeflow/spark-operator internal/webhook/sparkpod_defaulter.go, mutateSparkPod). Without the
# webhook such fields are ignored in silence; in the pod templates Spark applies them itself.
WEBHOOK_ONLY_POD_FIELDS = {
    "env", "envFrom", "configMaps", "secrets", "volumeMounts", "ports", "hostNetwork", "hostAliases",
    "initContainers", "sidecars", "dnsConfig", "priorityClassName", "schedulerName", "nodeSelector", "affinity",
    "tolerations", "memoryLimit", "gpu", "securityContext", "podSecurityContext", "terminationGracePeriodSeconds",
    "lifecycle", "shareProcessNamespace",
}
WEBHOOK_ONLY_APP_FIELDS = {"sparkConfigMap", "hadoopConfigMap", "monitoring"}


def test_sparkapplication_works_without_the_operators_mutating_webhook():
    """Pod templates (operator 2.1+, Spark 3.0+) carry what only the webhook could add otherwise;
    the operator then does not mark the pods for the webhook at all."""
    spec = manifest()["SparkApplication"]["spec"]
    assert tuple(int(x) for x in spec["sparkVersion"].split(".")) >= (3, 0, 0), "templates need Spark 3.0+"
    assert not WEBHOOK_ONLY_APP_FIELDS & set(spec)
    assert all(v["name"].startswith("spark-local-dir-") for v in spec.get("volumes", [])), \
        "spec.volumes other than Spark's local dirs are mounted by the webhook only"
    for role in ("driver", "executor"):
        assert not WEBHOOK_ONLY_POD_FIELDS & set(spec[role]), f"{role}: {WEBHOOK_ONLY_POD_FIELDS & set(spec[role])}"
        template = spec[role]["template"]["spec"]
        assert [c["name"] for c in template["containers"]] == [SPARK_CONTAINERS[role]], role
        mounted = {m["name"] for m in container(spec, role).get("volumeMounts", [])}
        assert mounted and mounted <= set(pod_volumes(spec, role)), f"{role}: mounts a volume its pod lacks"
    text = MANIFEST.read_text()
    assert "mutating webhook" in text.lower() and "mutating webhook" in (MANIFEST.parent / "README.md").read_text()


def image_user() -> tuple[int, int]:
    """(uid, gid) of the user the Dockerfile creates and runs the spark target as."""
    useradd = next(r for r in ops(stage("runtime"), "RUN") if "useradd" in r)
    uid, gid = re.search(r"--uid (\d+)", useradd)[1], re.search(r"--gid (\d+)", useradd)[1]
    assert ops(stage("spark"), "USER") == [uid]
    return int(uid), int(gid)


def test_pods_run_as_the_image_user_and_own_the_checkpoint_volume_through_fsgroup():
    """A fresh volume is root's: fsGroup makes Kubernetes hand it to the pods' group, so that the
    non-root image user can write the checkpoint (and read projected tokens)."""
    spec = manifest()["SparkApplication"]["spec"]
    uid, _gid = image_user()
    for role in ("driver", "executor"):
        pod = spec[role]["template"]["spec"]["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == uid, role
        assert pod["fsGroup"] == pod["runAsGroup"] and pod["fsGroup"] > 0, role
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, role
        spark = container(spec, role)["securityContext"]
        assert spark["allowPrivilegeEscalation"] is False and spark["capabilities"] == {"drop": ["ALL"]}, role
        assert "checkpoint" in _mounts(spec, role), role


def test_state_partitions_have_one_source_of_truth(monkeypatch, tmp_path):
    """spark.sql.shuffle.partitions is set in sparkConf alone, to executors x cores (one state
    partition per core, docs/operations.md Sizing); the config's spark: section would override
    it when the session starts, so the ConfigMap sets none; one client shard per state partition
    (docs/operations.md, Rules of thumb)."""
    objects = manifest()
    spec = objects["SparkApplication"]["spec"]
    partitions = int(spec["sparkConf"]["spark.sql.shuffle.partitions"])
    assert partitions == spec["executor"]["instances"] * spec["executor"]["cores"]
    text = objects["ConfigMap"]["data"]["epochwatch.yaml"]
    for name in re.findall(r"\$\{([A-Z_][A-Z0-9_]*)\}", text):
        monkeypatch.setenv(name, "x")
    (tmp_path / "epochwatch.yaml").write_text(text)
    settings = config.load(tmp_path / "epochwatch.yaml")
    assert "spark.sql.shuffle.partitions" not in settings.spark, "a second value, which would win at start-up"
    assert settings.rules.client_shards == partitions
    assert "spark.sql.shuffle.partitions" not in str(spec["driver"]) + str(spec["executor"])


def test_object_storage_credentials_come_from_the_pods_identity():
    """S3 through the AWS SDK's default chain (IRSA's web identity token, EKS Pod Identity, ...):
    no keys in the manifest, the same service account on driver and executors (both write the
    checkpoint), and the jars in the image instead of fetched at start (spark.jars.packages)."""
    objects = manifest()
    spec = objects["SparkApplication"]["spec"]
    assert spec["sparkConf"]["spark.hadoop.fs.s3a.aws.credentials.provider"] == \
        "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
    text = MANIFEST.read_text()
    # GCS through hadoop-gcp in the image, which Hadoop's defaults bind to gs://: only the
    # credentials, from the metadata server (GKE workload identity); tests/deploy/
    # test_gcs_connector.py runs these on PySpark's Hadoop
    gcs = {k: v for k, v in spec["sparkConf"].items() if k.startswith("spark.hadoop.fs.gs.")}
    assert gcs == {"spark.hadoop.fs.gs.auth.type": "COMPUTE_ENGINE"}
    assert not any(k.startswith("spark.hadoop.fs.AbstractFileSystem.gs.") for k in spec["sparkConf"])
    for leak in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "fs.s3a.access.key", "fs.s3a.secret.key",
                 "GOOGLE_APPLICATION_CREDENTIALS", "json.keyfile", "private_key",
                 "spark.jars.packages", "spark.jars.ivy"):
        assert leak not in text, leak
    account = objects["ServiceAccount"]["metadata"]["name"]
    assert spec["driver"]["serviceAccount"] == spec["executor"]["serviceAccount"] == account
    assert re.search(r"#\s*eks\.amazonaws\.com/role-arn: arn:aws:iam::\d+:role/", text), "IRSA shown"
    assert re.search(r"#\s*iam\.gke\.io/gcp-service-account: [\w-]+@[\w-]+\.iam\.gserviceaccount\.com", text), \
        "GKE workload identity shown"
    binding = objects["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": objects["Role"]["metadata"]["name"]}
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [("ServiceAccount", account)]
    [rule] = objects["Role"]["rules"]
    assert {"pods", "services", "configmaps"} <= set(rule["resources"])
    assert {"create", "get", "list", "watch", "delete"} <= set(rule["verbs"]), "what the driver does to executors"


def test_commented_servicemonitor_alternative_is_valid_yaml_for_the_meta_alert_job():
    text = MANIFEST.read_text()
    block = text[text.index("# ---\n# apiVersion: monitoring.coreos.com/v1"):]
    monitor = yaml.safe_load("\n".join(line.removeprefix("#").removeprefix(" ") for line in block.splitlines()
                                       if line.startswith("#") and not line.startswith("# ---")))
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # job label = the Service's app.kubernetes.io/name, which the meta-alerts select as job="epochwatch"
    service_labels = manifest()["Service"]["metadata"]["labels"]
    assert service_labels[monitor["spec"]["jobLabel"]] == "epochwatch"
    rules = (DEPLOY / "prometheus" / "rules" / "epochwatch-meta.yml").read_text()
    assert 'job="epochwatch"' in rules


# --- container ---------------------------------------------------------------------------------

def dockerfile_stages() -> list[dict]:
    """Instructions per build stage: [{"name", "from", "ops": [(INSTRUCTION, args)]}]."""
    lines, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    stages: list[dict] = []
    for line in lines:
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            image, _, name = args.partition(" AS ")
            stages.append({"name": name.strip(), "from": image.strip(), "ops": []})
        else:
            stages[-1]["ops"].append((op, args.strip()))
    return stages


def ops(stage: dict, instruction: str) -> list[str]:
    return [args for op, args in stage["ops"] if op == instruction]


def stage(name: str) -> dict:
    return next(s for s in dockerfile_stages() if s["name"] == name)


def image_copies() -> dict[str, str]:
    """Destination in the image -> repository path, for the single-file COPYs of every stage."""
    pairs = [args.split() for stage in dockerfile_stages() for args in ops(stage, "COPY")]
    return {words[1]: words[0] for words in pairs if len(words) == 2}


def copies_from_stages(stage_: dict) -> list[tuple[str, str, str]]:
    """(stage, source in it, destination) of the stage's COPY --from=... instructions."""
    found = []
    for args in ops(stage_, "COPY"):
        words = args.split()
        if words[0].startswith("--from="):
            found.append((words[0].removeprefix("--from="), words[1], words[2]))
    return found


def test_dockerfile_default_target_runs_epochwatch_as_non_root():
    stages = dockerfile_stages()
    base, final = stage("runtime"), stages[-1]
    assert re.fullmatch(r"python:3\.11-slim(-bookworm)?", base["from"])
    assert any("openjdk-17-jre-headless" in run for run in ops(base, "RUN"))
    assert any(re.search(r"\bpip install \.(\s|$)", run) for run in ops(base, "RUN"))
    assert final["from"] == base["name"], "the default (last) target builds on the runtime stage"
    assert json.loads(ops(final, "ENTRYPOINT")[-1]) == ["epochwatch"]
    assert json.loads(ops(final, "CMD")[-1]) == ["run", "--config", "/etc/epochwatch/epochwatch.yaml"]
    assert ops(final, "EXPOSE") == [str(METRICS_PORT)]
    assert ops(final, "USER") and ops(final, "USER")[-1] not in ("root", "0")
    (check,) = ops(final, "HEALTHCHECK")
    assert f"http://127.0.0.1:{METRICS_PORT}/metrics" in check


def test_dockerfile_spark_target_answers_spark_pod_commands():
    spark = next(s for s in dockerfile_stages() if s["name"] == "spark")
    (entry,) = ops(spark, "ENTRYPOINT")
    script = json.loads(entry)[0]
    source = ROOT / image_copies()[script]
    text = source.read_text()
    assert "driver)" in text and "executor)" in text and "KubernetesExecutorBackend" in text
    assert ops(spark, "USER")[-1] not in ("root", "0")


def test_every_copied_path_exists_in_the_repository():
    for stage_ in dockerfile_stages():
        for args in ops(stage_, "COPY"):
            if args.startswith("--from="):
                continue  # from an earlier stage, not from the repository
            *sources, _dest = args.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: not in the repository"


def test_container_config_loads_and_names_the_missing_bootstrap_variable(monkeypatch):
    stages = dockerfile_stages()
    image_config = ROOT / image_copies()["/etc/epochwatch/epochwatch.yaml"]
    env_defaults = " ".join(ops(stage("runtime"), "ENV"))
    assert 'EPOCHWATCH_ALERTMANAGER_URL=""' in env_defaults
    monkeypatch.setenv("EPOCHWATCH_ALERTMANAGER_URL", "")
    monkeypatch.delenv("EPOCHWATCH_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(config.ConfigError) as missing:
        config.load(image_config)
    assert "EPOCHWATCH_BOOTSTRAP_SERVERS" in str(missing.value) and "export" in str(missing.value)
    monkeypatch.setenv("EPOCHWATCH_BOOTSTRAP_SERVERS", "kafka:9092")
    settings = config.load(image_config)
    assert settings.kafka.bootstrap_servers == "kafka:9092" and settings.sinks.alertmanager_url in ("", None)
    assert (settings.sinks.metrics_port, settings.sinks.metrics_address) == (METRICS_PORT, "0.0.0.0")
    volumes = [v for stage_ in stages for v in ops(stage_, "VOLUME")]
    assert any(settings.checkpoint_location.startswith(json.loads(v)[0]) for v in volumes)


POM = DEPLOY / "container" / "pom.xml"
MAVEN = "{http://maven.apache.org/POM/4.0.0}"


def pom_dependencies() -> dict[str, str]:
    """group:artifact[:classifier] -> version of deploy/container/pom.xml, each checked to exclude
    its own transitive dependencies (the image gets exactly what is listed)."""
    root = ElementTree.parse(POM).getroot()
    found = {}
    for dep in root.iter(f"{MAVEN}dependency"):
        parts = [dep.findtext(f"{MAVEN}{part}") for part in ("groupId", "artifactId", "classifier")]
        name = ":".join(p for p in parts if p)
        exclusions = [(e.findtext(f"{MAVEN}groupId"), e.findtext(f"{MAVEN}artifactId"))
                      for e in dep.iter(f"{MAVEN}exclusion")]
        assert exclusions == [("*", "*")], f"{name} would bring unlisted jars"
        found[name] = dep.findtext(f"{MAVEN}version")
    return found


def test_object_storage_jars_are_pinned_and_match_sparks_hadoop():
    deps = pom_dependencies()
    assert set(deps) == {"org.apache.hadoop:hadoop-aws", "software.amazon.awssdk:bundle",
                         "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3",
                         "org.wildfly.openssl:wildfly-openssl", "org.apache.hadoop:hadoop-gcp"}
    for name, version in deps.items():
        assert re.fullmatch(r"\d+(\.\d+)+(\.Final)?", version or ""), f"{name}: {version!r} is not a pinned version"
    # hadoop-aws and hadoop-gcp are built against one Hadoop: the client jars PySpark ships
    [client] = (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")
    hadoop = client.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    assert deps["org.apache.hadoop:hadoop-aws"] == deps["org.apache.hadoop:hadoop-gcp"] == hadoop


def test_image_bakes_the_object_storage_jars_into_sparks_jars_folder():
    jars = stage("object-storage-jars")
    assert image_copies()["/build/pom.xml"] == str(POM.relative_to(ROOT))
    [resolve] = [r for r in ops(jars, "RUN") if r.startswith("mvn ")]
    assert "-f /build/pom.xml" in resolve and "dependency:copy-dependencies" in resolve
    # the build fails unless both file systems' jars were copied
    assert "ls /build/jars/hadoop-aws-*.jar /build/jars/hadoop-gcp-*.jar" in resolve
    output = re.search(r"-DoutputDirectory=(\S+)", resolve)[1]
    runtime = stage("runtime")
    spark_home = re.search(r"SPARK_HOME=(\S+)", " ".join(ops(runtime, "ENV")))[1]
    assert copies_from_stages(runtime) == [("object-storage-jars", f"{output}/", "$SPARK_HOME/jars/")]
    assert spark_home.endswith("/site-packages/pyspark"), "Spark's jars folder is the pyspark package's"


# --- scripts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_syntax_and_shellcheck(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    if shutil.which("shellcheck"):  # deploy/local/dev installs it for `test`; bash -n alone otherwise
        result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout


def test_driver_entry_point_compiles():
    compile(DRIVER_FILE.read_text(), str(DRIVER_FILE), "exec")
    assert 'cli.main(["run", *argv])' in DRIVER_FILE.read_text()


def submit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {"PATH": "/usr/bin:/bin", **(env or {})}  # no EPOCHWATCH_* from the caller's shell
    return subprocess.run(["bash", str(SUBMIT), *args], capture_output=True, text=True, timeout=30, env=clean)


CONFIG = str(DEPLOY / "config" / "epochwatch.yaml")
YARN = ("--master", "yarn", "--config", CONFIG, "--checkpoint", "hdfs:///epochwatch/checkpoint")
K8S = ("--master", "k8s://https://k8s:443")


def test_submit_help_documents_every_option():
    result = submit("--help")
    assert result.returncode == 0
    parsed = set(re.findall(r"^\s+(--[a-z-]+)\)", SUBMIT.read_text(), re.M))
    assert parsed and {flag for flag in parsed if flag not in result.stdout} == set()


def test_submit_builds_the_spark_submit_command():
    result = submit("--dry-run", *YARN, "--archive", str(DRIVER_FILE), "--", "--set", "kafka.maxOffsetsPerTrigger=1000")
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)  # the script prints the command shell-quoted (printf %q)
    confs = {words[i + 1].split("=", 1)[0]: words[i + 1].split("=", 1)[1] for i, w in enumerate(words) if w == "--conf"}
    assert confs["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert confs["spark.sql.shuffle.partitions"] == "4"  # 2 executors x 2 cores
    assert confs["spark.python.daemon.module"] == DEFAULTS["spark.python.daemon.module"]
    for role in ("driver", "executor"):
        assert confs[f"spark.{role}.extraJavaOptions"] == DEFAULTS[f"spark.{role}.extraJavaOptions"]
    assert confs["spark.yarn.maxAppAttempts"] == "4" and confs["spark.yarn.am.attemptFailuresValidityInterval"] == "1h"
    assert confs["spark.pyspark.python"] == "./environment/bin/python"
    assert words[words.index("--archives") + 1] == f"{DRIVER_FILE}#environment"
    tail = words[words.index(str(DRIVER_FILE)):]
    assert tail == [str(DRIVER_FILE), "--config", CONFIG, "--set", "checkpoint_location=hdfs:///epochwatch/checkpoint",
                    "--set", "kafka.maxOffsetsPerTrigger=1000"]


def test_submit_keeps_a_local_driver_on_loopback():
    result = submit("--dry-run", "--master", "local[2]", "--config", CONFIG, "--checkpoint", "/tmp/ckpt")
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    assert {"spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1", "spark.ui.enabled=false"} <= set(words)
    assert "--executor-memory" not in words  # executors run inside the driver


def test_submit_ships_the_config_in_yarn_cluster_mode():
    result = submit("--dry-run", *YARN, "--deploy-mode", "cluster")
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    assert words[words.index("--files") + 1] == CONFIG
    assert words[words.index("--config") + 1] == "epochwatch.yaml"
    assert "spark.pyspark.driver.python=python3" not in words  # the driver runs in the cluster


@pytest.mark.parametrize("num, why, args, env, named", [
    (1, "no master", ["--config", CONFIG, "--checkpoint", "s3a://b/c"], {}, "--master"),
    (2, "no config", ["--master", "yarn", "--checkpoint", "s3a://b/c"], {}, "EPOCHWATCH_CONFIG"),
    (3, "no checkpoint", ["--master", "yarn", "--config", CONFIG], {}, "--checkpoint"),
    (4, "a local checkpoint is lost when the driver moves", [*YARN[:4], "--checkpoint", "/tmp/ckpt"], {},
     "--checkpoint-on-shared-mount"),
    (5, "Kubernetes needs an image", [*K8S, "--config", CONFIG, "--checkpoint", "s3a://b/c"], {}, "--image"),
    (6, "a local config is not in a Kubernetes driver pod", [*K8S, "--deploy-mode", "cluster", "--config", CONFIG,
     "--checkpoint", "s3a://b/c", "--image", "x"], {}, "local:///etc/epochwatch/epochwatch.yaml"),
    (7, "unknown master", ["--master", "mesos://x", "--config", CONFIG, "--checkpoint", "s3a://b/c"], {}, "yarn"),
    (8, "a typo in an option", [*YARN, "--executor-memroy", "4g"], {}, "after --"),
    (9, "a bad size", [*YARN, "--driver-memory", "lots"], {}, "2g"),
    (10, "archives are a YARN feature", ["--master", "spark://h:7077", "--config", CONFIG, "--checkpoint", "s3a://b/c",
     "--archive", CONFIG], {}, "pip install"),
])
def test_submit_errors_name_the_flag_and_the_fix(num, why, args, env, named):
    result = submit("--dry-run", *args, env=env)
    assert result.returncode == 2, f"case {num}: {why}: {result.stdout}"
    assert named in result.stderr and "fix:" in result.stderr, f"case {num}: {why}: {result.stderr}"


def test_submit_reads_the_environment_and_accepts_mounted_paths():
    """Kubernetes with a ConfigMap-mounted config and a PVC checkpoint, all from EPOCHWATCH_*."""
    env = {"EPOCHWATCH_MASTER": "k8s://https://k8s:443", "EPOCHWATCH_DEPLOY_MODE": "cluster",
           "EPOCHWATCH_CONFIG": "local:///etc/epochwatch/epochwatch.yaml", "EPOCHWATCH_CHECKPOINT": "/checkpoint/ew",
           "EPOCHWATCH_IMAGE": "registry/epochwatch:1"}
    result = submit("--dry-run", "--checkpoint-on-shared-mount", env=env)
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    assert "spark.kubernetes.container.image=registry/epochwatch:1" in words
    main = manifest()["SparkApplication"]["spec"]["mainApplicationFile"]
    assert words[words.index(main):] == [main, "--config", "/etc/epochwatch/epochwatch.yaml",
                                         "--set", "checkpoint_location=/checkpoint/ew"]


def test_submit_gives_one_state_partition_per_executor_core_unless_told():
    """Why: more state partitions than cores move keys between Python workers every micro-batch
    (each then rebuilds its state); docs/operations.md, Sizing."""
    def partitions(*extra):
        result = submit("--dry-run", *YARN, *extra)
        assert result.returncode == 0, result.stderr
        return re.search(r"spark\.sql\.shuffle\.partitions=(\d+)", result.stdout)[1]

    assert partitions("--executor-cores", "3", "--num-executors", "5") == "15"
    assert partitions("--executor-cores", "3", "--shuffle-partitions", "7") == "7"
