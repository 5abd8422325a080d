"""The Kafka source (udfs) is handed its packer (streaming.spark.source_packs): udfs knows the
event contract and nothing of the job's keys, packs or gates."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from streaming.spark.packs import PACK_SCHEMA
from streaming.spark.source_packs import PackingKafkaSource, SourcePacker
from udfs.kafka_options import OptionError
from udfs.kafka_source import KafkaEventSource

UDFS = Path(__file__).resolve().parents[2] / "udfs"
PACKS = {"output": "packs", "decode": "avro", "kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "events"}


def test_udfs_imports_only_the_event_contract_of_streaming():
    imported = set()
    for path in UDFS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("streaming"):
                imported |= {f"{node.module}.{a.name}" if node.module == "streaming" else node.module
                             for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("streaming")}
    assert imported == {"streaming.events"}, imported


def test_the_jobs_source_packs_and_its_reader_travels_with_the_packer():
    source = PackingKafkaSource(PACKS)
    assert source.schema() == PACK_SCHEMA
    reader = pickle.loads(pickle.dumps(source.streamReader(None)))   # as Spark ships it to a task
    assert isinstance(reader.packer, SourcePacker)


def test_the_bare_source_refuses_packs_with_the_fix():
    with pytest.raises(OptionError, match="PackingKafkaSource"):
        KafkaEventSource(PACKS).schema()
