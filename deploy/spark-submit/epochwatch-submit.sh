#!/usr/bin/env bash
# Submit `epochwatch run` to a Spark cluster (YARN, standalone, Kubernetes) or run it locally.
# Every setting is a flag or an EPOCHWATCH_* variable; --help lists them; --dry-run prints the
# spark-submit command instead of running it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROCKSDB_PROVIDER="org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
IMAGE_DRIVER_FILE="local:///opt/epochwatch/deploy/spark-submit/epochwatch_driver.py"

usage() {
  cat <<'EOF'
Usage: epochwatch-submit.sh --master URL --config FILE --checkpoint URI [options] [-- RUN_OPTIONS]

Submits `epochwatch run --config FILE` with the Spark settings the job needs (RocksDB state
store for transformWithState, fixed state partitions, a durable checkpoint, the Python
environment of the executors, restart policy).

Required (flag, or the environment variable in brackets):
  --master URL           yarn | spark://HOST:7077 | k8s://https://HOST:443 | local[N]  [EPOCHWATCH_MASTER]
  --config FILE          epochwatch YAML config (check it: epochwatch validate-config)  [EPOCHWATCH_CONFIG]
                         local:///PATH = already inside the driver's container (Kubernetes ConfigMap)
  --checkpoint URI       durable checkpoint: hdfs://, s3a://, abfs://, gs://, ...        [EPOCHWATCH_CHECKPOINT]
                         Keep it for the life of the job: it holds the Kafka offsets and all state.

Options:
  --deploy-mode MODE     client (default: driver here) | cluster (driver in the cluster) [EPOCHWATCH_DEPLOY_MODE]
  --archive FILE.tar.gz  YARN: packed Python env with epochwatch installed, unpacked as ./environment
                         in every container (venv-pack or conda-pack, see docs/operations.md)
                                                                                         [EPOCHWATCH_ARCHIVE]
  --driver-python PATH   Python of a client-mode driver, with epochwatch installed (default python3)
                                                                                   [EPOCHWATCH_DRIVER_PYTHON]
  --image IMAGE          container image (Kubernetes; deploy/container/Dockerfile)      [EPOCHWATCH_IMAGE]
  --driver-file PATH     the driver entry point (default: epochwatch_driver.py next to this script;
                         on Kubernetes the copy inside the image)                   [EPOCHWATCH_DRIVER_FILE]
  --driver-memory SIZE   default 2g (the Alertmanager backlog and the alert history live there)
  --executor-memory SIZE default 4g (RocksDB state + Python workers)
  --executor-cores N     default 2
  --num-executors N      default 2
  --shuffle-partitions N state partitions, default executor cores x executors. Fixed by the first
                         run of a checkpoint: changing it later needs a new checkpoint.
  --name NAME            application name, default epochwatch
  --conf KEY=VALUE       any other Spark conf (repeatable), e.g. spark.jars.packages=...
  --checkpoint-on-shared-mount
                         accept a plain path as --checkpoint on a cluster: only for storage that
                         every driver host mounts (a Kubernetes PVC, NFS)
  --dry-run              print the spark-submit command and exit
  -h, --help             this text

RUN_OPTIONS after `--` go to `epochwatch run`, e.g. -- --set kafka.maxOffsetsPerTrigger=200000

Environment: SPARK_SUBMIT (default: spark-submit on PATH, else $SPARK_HOME/bin/spark-submit).

Restarts: on YARN the application is retried (4 attempts per hour, for ever); on a standalone
cluster in cluster mode --supervise restarts the driver; on Kubernetes use the Spark operator's
restartPolicy (deploy/kubernetes/sparkapplication.yaml). A restart resumes from the checkpoint.
EOF
}

fail() {  # fail WHAT FIX
  echo "epochwatch-submit: $1" >&2
  echo "  fix: $2" >&2
  echo "  (epochwatch-submit.sh --help lists every option)" >&2
  exit 2
}

master="${EPOCHWATCH_MASTER:-}"
config="${EPOCHWATCH_CONFIG:-}"
checkpoint="${EPOCHWATCH_CHECKPOINT:-}"
deploy_mode="${EPOCHWATCH_DEPLOY_MODE:-client}"
archive="${EPOCHWATCH_ARCHIVE:-}"
driver_python="${EPOCHWATCH_DRIVER_PYTHON:-python3}"
image="${EPOCHWATCH_IMAGE:-}"
driver_file="${EPOCHWATCH_DRIVER_FILE:-}"
driver_memory="2g"
executor_memory="4g"
executor_cores="2"
num_executors="2"
shuffle_partitions=""
name="epochwatch"
shared_mount=false
dry_run=false
extra_conf=()
run_args=()

has_conf() {  # has_conf KEY: was --conf KEY=... given?
  local kv
  for kv in "${extra_conf[@]+"${extra_conf[@]}"}"; do
    [ "${kv%%=*}" = "$1" ] && return 0
  done
  return 1
}

need_value() {  # need_value FLAG ARGC
  [ "$2" -ge 2 ] || fail "$1 needs a value" "write $1 VALUE"
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --master) need_value "$1" "$#"; master="$2"; shift 2 ;;
    --config) need_value "$1" "$#"; config="$2"; shift 2 ;;
    --checkpoint) need_value "$1" "$#"; checkpoint="$2"; shift 2 ;;
    --deploy-mode) need_value "$1" "$#"; deploy_mode="$2"; shift 2 ;;
    --archive) need_value "$1" "$#"; archive="$2"; shift 2 ;;
    --driver-python) need_value "$1" "$#"; driver_python="$2"; shift 2 ;;
    --image) need_value "$1" "$#"; image="$2"; shift 2 ;;
    --driver-file) need_value "$1" "$#"; driver_file="$2"; shift 2 ;;
    --driver-memory) need_value "$1" "$#"; driver_memory="$2"; shift 2 ;;
    --executor-memory) need_value "$1" "$#"; executor_memory="$2"; shift 2 ;;
    --executor-cores) need_value "$1" "$#"; executor_cores="$2"; shift 2 ;;
    --num-executors) need_value "$1" "$#"; num_executors="$2"; shift 2 ;;
    --shuffle-partitions) need_value "$1" "$#"; shuffle_partitions="$2"; shift 2 ;;
    --name) need_value "$1" "$#"; name="$2"; shift 2 ;;
    --conf)
      need_value "$1" "$#"
      case "$2" in *=*) extra_conf+=("$2") ;; *) fail "--conf $2 is not KEY=VALUE" "e.g. --conf spark.executor.instances=4" ;; esac
      shift 2 ;;
    --checkpoint-on-shared-mount) shared_mount=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    --) shift; run_args=("$@"); break ;;
    *) fail "unknown option '$1'" "see the options below --help; options for 'epochwatch run' go after --" ;;
  esac
done

# --- required settings -----------------------------------------------------------------------
[ -n "$master" ] || fail "no Spark master given" \
  "pass --master (or export EPOCHWATCH_MASTER), e.g. --master yarn, spark://host:7077, k8s://https://host:443, local[2]"
[ -n "$config" ] || fail "no epochwatch config given" \
  "pass --config FILE (or export EPOCHWATCH_CONFIG); start from deploy/config/epochwatch.yaml"
[ -n "$checkpoint" ] || fail "no checkpoint location given" \
  "pass --checkpoint URI (or export EPOCHWATCH_CHECKPOINT) on durable storage, e.g. hdfs:///epochwatch/checkpoint or s3a://bucket/epochwatch/checkpoint"

case "$deploy_mode" in
  client|cluster) ;;
  *) fail "--deploy-mode '$deploy_mode' is neither client nor cluster" "use --deploy-mode client or --deploy-mode cluster" ;;
esac
for pair in "driver-memory:$driver_memory" "executor-memory:$executor_memory"; do
  [[ "${pair#*:}" =~ ^[0-9]+[kmgtKMGT]?$ ]] || fail "--${pair%%:*} '${pair#*:}' is not a size" "write it like 2g or 4096m"
done
for pair in "executor-cores:$executor_cores" "num-executors:$num_executors" "shuffle-partitions:${shuffle_partitions:-1}"; do
  [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]] || fail "--${pair%%:*} '${pair#*:}' is not a positive whole number" "e.g. --${pair%%:*} 4"
done
# one state partition per executor core (docs/operations.md, Sizing)
shuffle_partitions="${shuffle_partitions:-$((executor_cores * num_executors))}"

case "$master" in
  local*) kind=local ;;
  yarn) kind=yarn ;;
  spark://*) kind=standalone ;;
  k8s://*) kind=k8s ;;
  *) fail "--master '$master' is not a Spark master URL" "use yarn, spark://HOST:PORT, k8s://https://HOST:PORT or local[N]" ;;
esac
if [ "$kind" = local ] && [ "$deploy_mode" = cluster ]; then
  fail "--deploy-mode cluster does not work with --master $master" "use --deploy-mode client for local runs"
fi

# The checkpoint holds the Kafka offsets and every broker's / client's state: a driver restarted
# on another host (or in a new pod) must find it, so a path on the driver's own disk will not do.
case "$checkpoint" in
  *://*) ;;
  *)
    if [ "$kind" != local ] && [ "$shared_mount" != true ]; then
      fail "--checkpoint '$checkpoint' is a path on the driver's local disk; a restarted driver elsewhere would start from scratch (new offsets, empty state)" \
        "use hdfs://, s3a://, abfs:// or gs://; or, if every driver host mounts that path (a Kubernetes PVC, NFS), add --checkpoint-on-shared-mount"
    fi ;;
esac

# --- where the driver file and the config come from --------------------------------------------
if [ -z "$driver_file" ]; then
  if [ "$kind" = k8s ]; then driver_file="$IMAGE_DRIVER_FILE"; else driver_file="$HERE/epochwatch_driver.py"; fi
fi
ship_files=()
case "$config" in
  local://*) config_arg="${config#local://}" ;;  # already where the driver runs (image, ConfigMap)
  *)
    [ -f "$config" ] || fail "config file '$config' does not exist" "pass the path of your epochwatch YAML (see deploy/config/epochwatch.yaml)"
    if [ "$deploy_mode" = cluster ]; then
      if [ "$kind" = k8s ] && ! has_conf spark.kubernetes.file.upload.path; then
        fail "on Kubernetes in cluster mode the config must be inside the driver pod" \
          "mount it (ConfigMap, see deploy/kubernetes) and pass --config local:///etc/epochwatch/epochwatch.yaml, or add --conf spark.kubernetes.file.upload.path=s3a://bucket/path"
      fi
      ship_files=(--files "$config")  # lands in the driver's working directory
      config_arg="$(basename "$config")"
    else
      config_arg="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
    fi ;;
esac
if [ "$kind" = k8s ] && [ -z "$image" ]; then
  fail "Kubernetes needs a container image" "build deploy/container/Dockerfile (target spark), push it, pass --image REGISTRY/epochwatch:TAG (or export EPOCHWATCH_IMAGE)"
fi
if [ -n "$archive" ] && [ "$kind" != yarn ]; then
  fail "--archive is unpacked only in YARN containers, not with --master $master" \
    "on Kubernetes the image carries the Python environment (deploy/container/Dockerfile); elsewhere install epochwatch on every node (pip install .) and drop --archive"
fi
if [ -n "$archive" ] && [ ! -f "$archive" ]; then
  fail "archive '$archive' does not exist" "build it: python -m venv env && env/bin/pip install . venv-pack && env/bin/venv-pack -o epochwatch-env.tar.gz"
fi

# --- the command ------------------------------------------------------------------------------
if [ -n "${SPARK_SUBMIT:-}" ]; then
  submit="$SPARK_SUBMIT"
elif command -v spark-submit >/dev/null 2>&1; then
  submit="spark-submit"
elif [ -n "${SPARK_HOME:-}" ]; then
  submit="$SPARK_HOME/bin/spark-submit"
else
  submit=""
fi

cmd=("${submit:-spark-submit}" --master "$master" --deploy-mode "$deploy_mode" --name "$name"
  --driver-memory "$driver_memory"
  --conf "spark.sql.streaming.stateStore.providerClass=$ROCKSDB_PROVIDER"
  # RocksDB uploads only a changelog per micro-batch instead of whole files: cheaper on S3/HDFS
  --conf "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true"
  --conf "spark.sql.shuffle.partitions=$shuffle_partitions"
  --conf "spark.sql.session.timeZone=UTC"
  --conf "spark.sql.execution.arrow.pyspark.enabled=true"
  # Python workers import the installed pyspark, not Spark's pyspark.zip (udfs/worker_daemon.py)
  --conf "spark.python.daemon.module=udfs.worker_daemon"
  # the JIT's quick compiler only, and room for its code (streaming/spark/session.py: JIT_OPTIONS, docs/operations.md)
  --conf "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=128m"
  --conf "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=128m")

if [ "$kind" = local ]; then
  # one machine: keep the driver (and its UI) on loopback, as `epochwatch run` does by itself
  cmd+=(--conf "spark.driver.host=127.0.0.1" --conf "spark.driver.bindAddress=127.0.0.1" --conf "spark.ui.enabled=false")
else
  cmd+=(--executor-memory "$executor_memory" --executor-cores "$executor_cores"
    --conf "spark.executor.instances=$num_executors"
    # a streaming job must not give its executors back between micro-batches
    --conf "spark.dynamicAllocation.enabled=false")
fi
case "$kind" in
  yarn)
    cmd+=(--conf "spark.yarn.maxAppAttempts=4" --conf "spark.yarn.am.attemptFailuresValidityInterval=1h") ;;
  standalone)
    if [ "$deploy_mode" = cluster ]; then cmd+=(--supervise); fi ;;
  k8s)
    cmd+=(--conf "spark.kubernetes.container.image=$image") ;;
esac
if [ -n "$archive" ]; then
  cmd+=(--archives "$archive#environment" --conf "spark.pyspark.python=./environment/bin/python")
fi
if [ "$deploy_mode" = client ]; then
  cmd+=(--conf "spark.pyspark.driver.python=$driver_python")
fi
for kv in "${extra_conf[@]+"${extra_conf[@]}"}"; do
  cmd+=(--conf "$kv")
done
cmd+=("${ship_files[@]+"${ship_files[@]}"}" "$driver_file" --config "$config_arg"
  --set "checkpoint_location=$checkpoint" "${run_args[@]+"${run_args[@]}"}")

if [ "$dry_run" = true ]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
[ -n "$submit" ] || fail "spark-submit not found" \
  "put Spark's bin/ on PATH, export SPARK_HOME, or export SPARK_SUBMIT=/path/to/spark-submit (pip's pyspark ships one in .venv/bin)"
exec "${cmd[@]}"
