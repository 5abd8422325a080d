import sys, time
import pandas as pd
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import *

mode = sys.argv[1]; nkeys = int(sys.argv[2]); nrows = int(sys.argv[3])
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "4")
  .config("spark.sql.streaming.stateStore.providerClass","org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
  .config("spark.ui.enabled","false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

class PerKey(StatefulProcessor):
    def init(self, h):
        self.s = h.getValueState("s", StructType([StructField("n", LongType()), StructField("last", LongType())]))
    def handleInputRows(self, key, rows, tv):
        n = 0; last = 0
        for pdf in rows:
            n += len(pdf); last = int(pdf["v"].max())
        cur = self.s.get()
        self.s.update((n + (cur[0] if cur else 0), last))
        yield pd.DataFrame({"k": [str(key[0])], "n": [n]})
    def close(self): pass

class Sharded(StatefulProcessor):
    def init(self, h):
        self.s = h.getListState("s", StructType([StructField("id", StringType()), StructField("n", LongType()), StructField("last", LongType())]))
    def handleInputRows(self, key, rows, tv):
        table = {r[0]: [r[1], r[2]] for r in self.s.get()}
        cnt = 0
        for pdf in rows:
            for eid, v in zip(pdf["eid"].tolist(), pdf["v"].tolist()):
                e = table.get(eid)
                if e is None: table[eid] = [1, v]
                else: e[0] += 1; e[1] = v
                cnt += 1
        self.s.put([(k, a, b) for k, (a, b) in table.items()])
        yield pd.DataFrame({"k": [str(key[0])], "n": [cnt]})
    def close(self): pass

df = spark.range(nrows).select((F.col("id") % nkeys).cast("string").alias("eid"), F.col("id").alias("v"))
df = df.repartition(4)
df.write.mode("overwrite").parquet(f"/tmp/exp/in_{nkeys}_{nrows}")
schema = df.schema
src = spark.readStream.schema(schema).parquet(f"/tmp/exp/in_{nkeys}_{nrows}")
out = StructType([StructField("k", StringType()), StructField("n", LongType())])
if mode == "perkey":
    g = src.groupBy("eid").transformWithStateInPandas(PerKey(), out, "append", "None")
else:
    g = src.withColumn("shard", F.abs(F.hash("eid")) % 16).groupBy("shard").transformWithStateInPandas(Sharded(), out, "append", "None")
import shutil; shutil.rmtree("/tmp/exp/ck_"+mode, ignore_errors=True)
q = g.writeStream.format("noop").option("checkpointLocation", "/tmp/exp/ck_"+mode).trigger(availableNow=True).start()
t=time.time(); q.awaitTermination(); el=time.time()-t
print(mode, nkeys, nrows, "%.1fs"%el, "%.0f rows/s"%(nrows/el), q.lastProgress["batchId"] if q.lastProgress else None)
