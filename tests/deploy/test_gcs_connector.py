"""The GCS connector the image carries serves ``gs://`` on PySpark's own Hadoop client with the
manifest's ``sparkConf``: the jar deploy/container/pom.xml pins, resolved from the local Maven
repository, on the classpath of a JVM started the way PySpark starts its driver, with Hadoop's
defaults (core-default.xml) under the manifest's ``spark.hadoop.*`` keys, as Spark applies them.

No GCS is reached: the storage endpoint and the metadata server point at a closed loopback port,
and the file system is initialised unauthenticated. What a bucket would answer is not tested."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from py4j.protocol import Py4JJavaError

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "deploy" / "container" / "pom.xml"
MANIFEST = ROOT / "deploy" / "kubernetes" / "sparkapplication.yaml"
CONNECTOR_FS = "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"
CONNECTOR_AFS = "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS"
AUTH_TYPES = ("com.google.cloud.hadoop.repackaged.gcs.com.google.cloud.hadoop.util."
              "HadoopCredentialsConfiguration$AuthenticationType")
CLOSED_PORT = "http://127.0.0.1:9/"  # discard: nothing listens, a request fails at once


def manifest_hadoop_conf() -> dict[str, str]:
    """The manifest's sparkConf spark.hadoop.* keys without the prefix: what Spark sets on Hadoop."""
    [app] = [o for o in yaml.safe_load_all(MANIFEST.read_text()) if o and o["kind"] == "SparkApplication"]
    return {k.removeprefix("spark.hadoop."): v for k, v in app["spec"]["sparkConf"].items()
            if k.startswith("spark.hadoop.fs.gs.") or k.startswith("spark.hadoop.fs.AbstractFileSystem.gs.")}


@pytest.fixture(scope="module")
def connector_jar(tmp_path_factory) -> Path:
    """The shaded jar as the image's build stage copies it, offline from ~/.m2 (never fetched here)."""
    if shutil.which("mvn") is None:
        pytest.skip("Maven is not installed")
    out = tmp_path_factory.mktemp("jars")
    done = subprocess.run(["mvn", "-o", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                           f"-DoutputDirectory={out}", "-DincludeArtifactIds=gcs-connector"],
                          capture_output=True, text=True, timeout=300)
    jars = list(out.glob("gcs-connector-*-shaded.jar"))
    if done.returncode != 0 or not jars:
        pytest.skip("the pinned gcs-connector is not in the local Maven repository: run "
                    f"`mvn -f {POM.relative_to(ROOT)} dependency:resolve` once\n{done.stdout[-2000:]}")
    [jar] = jars
    return jar


@pytest.fixture(scope="module")
def jvm(connector_jar):
    """A JVM with the jar on its system classpath (the image puts it in Spark's jars folder);
    the metadata server, which application default credentials would ask, at a closed loopback port."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    mp = pytest.MonkeyPatch()
    mp.setenv("GCE_METADATA_HOST", CLOSED_PORT.removeprefix("http://").rstrip("/"))
    mp.setenv("GCE_METADATA_IP", CLOSED_PORT.removeprefix("http://").rstrip("/"))
    mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    gateway = launch_gateway(SparkConf().set("spark.driver.extraClassPath", str(connector_jar)))
    try:
        yield gateway
    finally:
        gateway.shutdown()
        gateway.proc.terminate()
        gateway.proc.wait(timeout=30)
        mp.undo()


def hadoop_conf(gateway, keys: dict[str, str]):
    conf = gateway.jvm.org.apache.hadoop.conf.Configuration()  # loads core-default.xml
    for key, value in keys.items():
        conf.set(key, str(value))
    return conf


def test_manifest_points_gs_at_the_connector_and_it_loads_on_pysparks_hadoop(jvm):
    conf = hadoop_conf(jvm, manifest_hadoop_conf())
    hadoop = jvm.jvm.org.apache.hadoop.fs
    assert hadoop.FileSystem.getFileSystemClass("gs", conf).getName() == CONNECTOR_FS
    # Spark's checkpoint manager goes through FileContext: the AbstractFileSystem binding
    afs = conf.getClassByName(conf.get("fs.AbstractFileSystem.gs.impl"))
    assert afs.getName() == CONNECTOR_AFS
    assert jvm.jvm.java.lang.Class.forName("org.apache.hadoop.fs.AbstractFileSystem").isAssignableFrom(afs)
    # the auth type is one this connector knows: application default credentials (workload identity)
    auth = conf.getClassByName(AUTH_TYPES)
    assert conf.get("fs.gs.auth.type") == "APPLICATION_DEFAULT"
    assert jvm.jvm.java.lang.Enum.valueOf(auth, conf.get("fs.gs.auth.type")).name() == "APPLICATION_DEFAULT"


def test_file_system_and_file_context_initialise_with_the_manifest_conf(jvm):
    """initialize() parses every fs.gs.* setting (Hadoop's defaults included) and builds the
    storage client; unauthenticated and at a closed loopback port, so nothing leaves the host."""
    conf = hadoop_conf(jvm, {**manifest_hadoop_conf(), "fs.gs.auth.type": "UNAUTHENTICATED",
                             "fs.gs.storage.root.url": CLOSED_PORT})
    hadoop = jvm.jvm.org.apache.hadoop.fs
    uri = jvm.jvm.java.net.URI("gs://epochwatch-checkpoint/")
    fs = hadoop.FileSystem.newInstance(uri, conf)
    try:
        assert fs.getClass().getName() == CONNECTOR_FS
        assert fs.getUri().toString() == "gs://epochwatch-checkpoint/"
    finally:
        fs.close()
    context = hadoop.FileContext.getFileContext(uri, conf)
    assert context.getDefaultFileSystem().getClass().getName() == CONNECTOR_AFS


@pytest.mark.parametrize("num, why, dropped, error", [
    (1, "PySpark's Hadoop 3.5 defaults name hadoop-gcp's file system, which the image does not carry",
     ("fs.gs.impl",), "ClassNotFoundException: Class org.apache.hadoop.fs.gs.GoogleHadoopFileSystem"),
    (2, "Hadoop 3.5's default block size is \"64m\", which this connector reads as a plain number",
     ("fs.gs.block.size",), 'NumberFormatException: For input string: "64m"'),
])
def test_each_manifest_key_is_needed(jvm, num, why, dropped, error):
    keys = {k: v for k, v in manifest_hadoop_conf().items() if k not in dropped}
    conf = hadoop_conf(jvm, {**keys, "fs.gs.auth.type": "UNAUTHENTICATED", "fs.gs.storage.root.url": CLOSED_PORT})
    with pytest.raises(Py4JJavaError) as failed:
        jvm.jvm.org.apache.hadoop.fs.FileSystem.newInstance(jvm.jvm.java.net.URI("gs://epochwatch-checkpoint/"), conf)
    assert error in str(failed.value), f"case {num}: {why}"
