"""The GCS connector the image carries serves ``gs://`` on PySpark's own Hadoop client with the
manifest's ``sparkConf``: the jar deploy/container/pom.xml pins, resolved by Maven as the image's
build stage resolves it, on the classpath of a JVM started the way PySpark starts its driver, with
Hadoop's defaults (core-default.xml) under the manifest's ``spark.hadoop.*`` keys, as Spark applies
them.

Nothing leaves the host: the JVM resolves names from a hosts file that knows only loopback names,
and the metadata server is a loopback listener that records what it is asked and answers nothing.
What a bucket would answer is not tested."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from py4j.protocol import Py4JJavaError

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "deploy" / "container" / "pom.xml"
MANIFEST = ROOT / "deploy" / "kubernetes" / "sparkapplication.yaml"
CONNECTOR_FS = "org.apache.hadoop.fs.gs.GoogleHadoopFileSystem"
CONNECTOR_AFS = "org.apache.hadoop.fs.gs.Gs"
AUTH_TYPES = "org.apache.hadoop.fs.gs.HadoopCredentialsConfiguration$AuthenticationType"
BUCKET = "gs://epochwatch-checkpoint/"


def manifest_hadoop_conf() -> dict[str, str]:
    """The manifest's sparkConf spark.hadoop.* keys without the prefix: what Spark sets on Hadoop."""
    [app] = [o for o in yaml.safe_load_all(MANIFEST.read_text()) if o and o["kind"] == "SparkApplication"]
    return {k.removeprefix("spark.hadoop."): str(v) for k, v in app["spec"]["sparkConf"].items()
            if k.startswith("spark.hadoop.")}


@pytest.fixture(scope="module")
def connector_jar(tmp_path_factory) -> Path:
    """hadoop-gcp as the image's build stage gets it: `mvn dependency:copy-dependencies` on the pom,
    online, so a version the repository does not serve fails here rather than in the image build."""
    if shutil.which("mvn") is None:
        pytest.fail("Maven is not installed: the image build resolves deploy/container/pom.xml with it")
    out = tmp_path_factory.mktemp("jars")
    done = subprocess.run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                           f"-DoutputDirectory={out}", "-DincludeArtifactIds=hadoop-gcp"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"Maven could not resolve {POM.relative_to(ROOT)}:\n{done.stdout[-3000:]}"
    [jar] = out.glob("hadoop-gcp-*.jar")
    return jar


class MetadataRequests(BaseHTTPRequestHandler):
    """Records each request and closes the connection without an answer: the client sees the
    metadata server fail, so no token is ever handed out."""

    seen: list[tuple[str, str, dict[str, str]]] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        self.close_connection = True

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


@pytest.fixture(scope="module")
def metadata_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), MetadataRequests)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def jvm(connector_jar, metadata_server, tmp_path_factory):
    """A JVM with the jar on its system classpath (the image puts it in Spark's jars folder);
    Google's libraries find the metadata server at GCE_METADATA_HOST, as they would on GKE at
    the node's metadata server."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    hosts = tmp_path_factory.mktemp("net") / "hosts"
    hosts.write_text(f"127.0.0.1 localhost {socket.gethostname()}\n")  # any other name: unknown host
    metadata = "127.0.0.1:%d" % metadata_server.server_address[1]
    mp = pytest.MonkeyPatch()
    mp.setenv("GCE_METADATA_HOST", metadata)
    mp.setenv("GCE_METADATA_IP", metadata)
    mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    for variable in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"):
        mp.delenv(variable, raising=False)
    conf = (SparkConf().set("spark.driver.extraClassPath", str(connector_jar))
            .set("spark.driver.extraJavaOptions", f"-Djdk.net.hosts.file={hosts}"))
    gateway = launch_gateway(conf)
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
        conf.set(key, value)
    return conf


def test_gs_resolves_to_the_jar_from_the_pom_with_the_manifest_conf(jvm, connector_jar):
    conf = hadoop_conf(jvm, manifest_hadoop_conf())
    fs_class = jvm.jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass("gs", conf)
    assert fs_class.getName() == CONNECTOR_FS
    assert Path(fs_class.getProtectionDomain().getCodeSource().getLocation().getPath()) == connector_jar
    # Spark's checkpoint manager goes through FileContext: the AbstractFileSystem binding
    afs = conf.getClassByName(conf.get("fs.AbstractFileSystem.gs.impl"))
    assert afs.getName() == CONNECTOR_AFS
    assert jvm.jvm.java.lang.Class.forName("org.apache.hadoop.fs.AbstractFileSystem").isAssignableFrom(afs)
    # the manifest's one GCS key is an auth type hadoop-gcp knows, and the one Hadoop's defaults set
    auth = jvm.jvm.java.lang.Enum.valueOf(conf.getClassByName(AUTH_TYPES), conf.get("fs.gs.auth.type"))
    assert auth.name() == "COMPUTE_ENGINE" == hadoop_conf(jvm, {}).get("fs.gs.auth.type")


def test_file_system_and_file_context_initialise_with_the_manifest_conf(jvm):
    """initialize() parses every fs.gs.* setting (Hadoop's defaults included, "64m" block size and
    all), builds the credentials and the storage client."""
    conf = hadoop_conf(jvm, manifest_hadoop_conf())
    hadoop = jvm.jvm.org.apache.hadoop.fs
    uri = jvm.jvm.java.net.URI(BUCKET)
    fs = hadoop.FileSystem.newInstance(uri, conf)
    try:
        assert fs.getClass().getName() == CONNECTOR_FS
        assert fs.getUri().toString() == BUCKET
    finally:
        fs.close()
    context = hadoop.FileContext.getFileContext(uri, conf)
    assert context.getDefaultFileSystem().getClass().getName() == CONNECTOR_AFS


def test_credentials_are_asked_of_the_metadata_server(jvm, metadata_server):
    """With the manifest's keys, the first call to GCS first asks the metadata server, which on
    GKE with workload identity answers for the pod's Kubernetes service account. Here it answers
    nothing, so the call fails before any request for a bucket could be made."""
    MetadataRequests.seen.clear()
    conf = hadoop_conf(jvm, manifest_hadoop_conf())
    hadoop = jvm.jvm.org.apache.hadoop.fs
    fs = hadoop.FileSystem.newInstance(jvm.jvm.java.net.URI(BUCKET), conf)
    try:
        with pytest.raises(Py4JJavaError) as failed:
            fs.getFileStatus(hadoop.Path(BUCKET + "epochwatch/checkpoint/metadata"))
    finally:
        fs.close()
    assert "ComputeEngineCredentials" in str(failed.value)
    assert MetadataRequests.seen, "the metadata server was never asked"
    host = "127.0.0.1:%d" % metadata_server.server_address[1]
    for method, path, headers in MetadataRequests.seen:
        assert (method, headers["host"], headers["metadata-flavor"]) == ("GET", host, "Google")
        assert path.startswith("/computeMetadata/v1/"), path
