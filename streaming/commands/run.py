"""epochwatch run --config FILE: the long-running job."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from streaming import config


def register(sub) -> None:
    p = sub.add_parser("run", help="run the monitor against Kafka (long-running)",
                       description="Consume events from Kafka, detect, and deliver alerts to the alerts topic, "
                                   "Alertmanager and /metrics. Restarts continue from the checkpoint.")
    p.add_argument("--config", help="YAML config file (see deploy/config/epochwatch.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set kafka.bootstrap.servers=127.0.0.1:9092")
    p.add_argument("--event-time", action="store_true",
                   help="decide on event time (deterministic, like replay) instead of wall-clock timers; "
                        "a completely silent stream then raises nothing until data arrives again")
    p.add_argument("--available-now", action="store_true", help="process what is in Kafka now, then stop (on event time: implies --event-time)")
    p.set_defaults(func=run)


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise config.ConfigError("--set", f"{pair!r} is not KEY=VALUE", "e.g. --set rules.controller.heartbeat.timeout.ms=9000")
        out[key.strip()] = value.strip()
    return out


def build_sinks(settings: config.Settings, console: bool):
    """The job's sinks, its metrics and its status board (both served on sinks.metrics.port)."""
    from streaming.rules.rollup import RollupPolicy, is_rollup
    from streaming.sinks.alert_history import read_alert_history
    from streaming.sinks.console import ConsoleSink
    from streaming.sinks.kafka import KafkaOutputSink
    from streaming.sinks.metrics import Metrics
    from streaming.sinks.rollup_stage import RollupStage
    from streaming.sinks.status import StatusBoard

    metrics, board = Metrics(), StatusBoard(lag_grace_ms=settings.rules.metadata_lag_grace_ms)
    if settings.sinks.metrics_port:
        metrics.serve(settings.sinks.metrics_port, settings.sinks.metrics_address, status=board)
    # the roll-up first (it completes the batch), Alertmanager after the alerts topic (a roll-up is
    # delivered only once it is on record: streaming.rules.rollup)
    rollup = RollupStage(RollupPolicy.from_settings(settings.rules))
    sinks = [rollup, KafkaOutputSink(settings), metrics, board]
    # After a restart: what was firing is re-sent and counted again (the alerts topic is the record).
    latest = list(read_alert_history(settings).values())
    metrics.seed_alerts([r for r in latest if not is_rollup(r)])   # the gauges count the clients' incidents
    pages = rollup.seed(latest)
    board.seed(pages)   # the incidents on-call sees, as Alertmanager has them
    if settings.sinks.alertmanager_urls():
        from streaming.sinks.alertmanager import AlertmanagerSink

        am = AlertmanagerSink.from_settings(settings.sinks, metrics)
        am.seed(pages)
        sinks.append(am)
    if console:
        sinks.append(ConsoleSink())
    return sinks, metrics, board


# How long a stop waits for the micro-batch in flight (Kubernetes' default grace period is 30 s).
BATCH_FINISH_WAIT_S = 20
# How long an idle query's stop waits for a micro-batch to end before it stops anyway
IDLE_GRACE_S = 2.0


def stop_between_batches(query, dispatcher, wait_s: float = BATCH_FINISH_WAIT_S,
                         idle_grace_s: float = IDLE_GRACE_S) -> None:
    """Stop the query right after a micro-batch has reached its sinks, waiting at most ``wait_s``
    for the one in flight (``idle_grace_s`` when none is). Stopped inside a batch, its foreachBatch
    call is interrupted: the batch is computed again at the next start, and Spark 4.3 logs the
    interruption as a Py4J traceback followed by a java.lang.StackOverflowError (its pattern match
    over that traceback), which looks like a crash in the job's log. Right after a batch, the next
    one first commits and plans (tens of milliseconds) before its foreachBatch: waiting for the
    dispatcher to be idle alone let a busy job's next batch start in between."""
    ended = threading.Event()
    dispatcher.after_batch(ended.set)
    busy = not dispatcher.idle.is_set()
    if not ended.wait(wait_s if busy else min(wait_s, idle_grace_s)) and not dispatcher.idle.is_set():
        logging.getLogger("epochwatch").warning(
            "the micro-batch in flight did not finish within %.0f s: stopping it (it runs again at the next "
            "start)", wait_s)
    query.stop()


def run(args) -> int:
    settings = config.load(args.config, parse_overrides(args.set))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from streaming.sinks.base import Dispatcher
    from streaming.spark.job import failure_text, start
    from streaming.spark.listeners import ProgressListener
    from streaming.spark.pipeline import EVENT_TIME, PROCESSING_TIME
    from streaming.spark.session import build_session

    spark = build_session("epochwatch", conf=settings.spark)
    sinks, metrics, board = build_sinks(settings, settings.sinks.console == "on")
    listener = ProgressListener(metrics, status=board)
    spark.streams.addListener(listener)
    dispatcher = Dispatcher(sinks)
    # a bounded read runs on the events' own time: in processing time Spark never ends the query
    event_time = args.event_time or args.available_now
    query = start(spark, settings, dispatcher, time_mode=EVENT_TIME if event_time else PROCESSING_TIME,
                  available_now=args.available_now)
    # Stopping from the signal handler would re-enter py4j while the main thread waits in it:
    # the handler only asks, the main loop stops the query.
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    try:
        while not stop_requested.is_set() and not query.awaitTermination(1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if query.isActive:
            stop_between_batches(query, dispatcher)
        dispatcher.close()
    if query.exception():
        print(f"epochwatch: the query failed: {failure_text(query.exception())}", file=sys.stderr)
        return 1
    from streaming.spark.refusals import everything_refused, refused_everything_message

    if query.lastProgress is not None:  # the last batch's line (and its records) before judging the run
        listener.wait_for_batch(query.lastProgress["batchId"], timeout_s=30)
    if args.available_now and everything_refused(metrics.records_read, metrics.refusals.total):
        print(f"epochwatch: {refused_everything_message(metrics.records_read, metrics.refusals.by_reason)}",
              file=sys.stderr)
        return 1
    return 0
