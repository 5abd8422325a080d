#!/usr/bin/env bash
# Entry point of the `spark` image target: Spark on Kubernetes starts the driver pod with
# `driver <spark-submit args>` and executor pods with `executor` plus SPARK_* variables. This
# does what Spark's own image entrypoint (resource-managers/kubernetes/docker) does for those
# two commands; anything else is run as given (e.g. `epochwatch validate-config ...`).
set -euo pipefail

: "${SPARK_HOME:?SPARK_HOME is not set: the image sets it to the pyspark package directory}"
SPARK_CLASSPATH="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then SPARK_CLASSPATH="$SPARK_CLASSPATH:$SPARK_EXTRA_CLASSPATH"; fi
if [ -n "${HADOOP_CONF_DIR:-}" ]; then SPARK_CLASSPATH="$HADOOP_CONF_DIR:$SPARK_CLASSPATH"; fi
if [ -n "${SPARK_CONF_DIR:-}" ]; then SPARK_CLASSPATH="$SPARK_CONF_DIR:$SPARK_CLASSPATH"; fi
SPARK_CLASSPATH="$SPARK_CLASSPATH:$PWD"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-python}"

case "${1:-}" in
  driver)
    shift
    exec /usr/bin/tini -s -- "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?set by Spark on the driver pod}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    java_opts=()
    for name in "${!SPARK_JAVA_OPT_@}"; do java_opts+=("${!name}"); done
    exec /usr/bin/tini -s -- java "${java_opts[@]+"${java_opts[@]}"}" \
      -Xms"${SPARK_EXECUTOR_MEMORY:?set by Spark on executor pods}" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$SPARK_CLASSPATH" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec "$@"
    ;;
esac
