"""How many clusters one job holds (``rules.state.max.clusters``): a producer inventing cluster ids
(a bug, a forgery) fills dead letters, not the state store, the engine hosts and Prometheus.

A cluster's state lives in keys of their own, stepped in parallel, so no key can count the
clusters. The count is kept where every batch passes: the driver sees the clusters each batch
packed (``clusters`` in the packs' observed metric, streaming.spark.pipeline.detect_packs) and keeps the
admitted set in a small file (:class:`ClusterRegistry`); the source's planner, a process of its
own on the driver's host, reads the file and hands the set to the batch's tasks, where routing
refuses the events of a cluster past the cap (:class:`ClusterGate`, dead-letter reason
``cluster_cap``).

New clusters are admitted in the task that meets them while the cap has room. Tasks of one batch
do not see each other's admissions (and the listener that updates the file runs after the
batch): a cluster's events usually come from several tasks, and a share of the room per task
would refuse a new cluster in every task while the job is far below the cap. So every task may
fill the room: a flood of new ids can leave up to the cap times the batch's tasks of clusters
with state for one batch; the registry keeps the cap, the others are refused from the next batch
on and their state expires.
A cluster unseen for ``rules.state.entity.expiry.ms`` leaves the set: by then its entities have
expired and its state is gone.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming.rules.validity import CLUSTER_CAP

SETTING = "rules.state.max.clusters"


class ClusterGate:
    """One source task's admissions: ``admitted`` from the registry, and new ones while the cap
    has room."""

    def __init__(self, max_clusters: int, admitted: Iterable[str]):
        self.max_clusters = max_clusters
        self.admitted = set(admitted)
        self.room = max(0, max_clusters - len(self.admitted))

    def refusals(self, cluster_ids: pa.ChunkedArray, decoded: np.ndarray) -> dict[int, tuple[str, str]]:
        """Row -> (reason, detail) of each event of a cluster past the cap, among the rows
        ``decoded`` marks (decoded, and refused for nothing else: those take no place). Events
        without a cluster id are left to the checks that refuse them."""
        candidates = pc.unique(pc.filter(cluster_ids, pa.array(decoded))).to_pylist()
        distinct = [c for c in candidates if c is not None and c not in self.admitted]
        refused = []
        for cluster in distinct:
            if self.room:
                self.admitted.add(cluster)
                self.room -= 1
            else:
                refused.append(cluster)
        if not refused:
            return {}
        hit = pc.fill_null(pc.is_in(cluster_ids, pa.array(refused, pa.string())), False).to_numpy(zero_copy_only=False)
        detail = (f"the job already holds {self.max_clusters} clusters ({SETTING}): raise it, or run another job "
                  f"for more clusters")
        return {row: (CLUSTER_CAP, detail) for row in np.flatnonzero(hit & decoded).tolist()}


class ClusterRegistry:
    """The driver's admitted set: the clusters of each batch, first come first admitted up to the
    cap, written to ``path`` for the planner after each batch (atomically: the planner never reads
    half a file)."""

    def __init__(self, path: str | Path, max_clusters: int, idle_ms: int, clock=time.time):
        self.path = Path(path)
        self.max_clusters = max_clusters
        self.idle_ms = idle_ms
        self.clock = clock
        self.last_seen: dict[str, float] = {}
        if self.path.exists():  # a restart: the clusters admitted before keep their place
            now = self.clock()
            self.last_seen = {c: now for c in read_admitted(self.path) or ()}

    def observe(self, clusters: Iterable[str]) -> None:
        now = self.clock()
        idle_s = self.idle_ms / 1000
        self.last_seen = {c: t for c, t in self.last_seen.items() if now - t <= idle_s}
        for cluster in clusters:
            if cluster in self.last_seen or len(self.last_seen) < self.max_clusters:
                self.last_seen[cluster] = now
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".clusters-")
        with os.fdopen(fd, "w") as out:
            json.dump({"admitted": sorted(self.last_seen)}, out)
        os.replace(tmp, self.path)


def read_admitted(path: str | Path) -> frozenset[str] | None:
    """The admitted set the registry last wrote; None before its first write, or if the file is
    not the registry's (then the tasks admit up to the cap again, as in a first batch)."""
    try:
        return frozenset(str(c) for c in json.loads(Path(path).read_text())["admitted"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        logging.getLogger("epochwatch.cluster_gate").error("%s is not a cluster registry (%s): ignored", path, exc)
        return None
