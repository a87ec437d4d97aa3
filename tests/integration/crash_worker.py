"""Run one flow forever in small micro-batches, in its own process, so a test can kill -9 it mid-stream."""

import sys

from lakehouse.infra.settings import Settings
from lakehouse.infra.spark import get_spark
from lakehouse.streaming.context import FlowContext
from lakehouse.streaming.flows import BY_NAME
from lakehouse.streaming.runner import start_flow

if __name__ == "__main__":
    home, jars_dir, lake_root, bootstrap, flow_name = sys.argv[1:6]
    spark = get_spark(Settings(home=home, jars_dir=jars_dir, spark_shuffle_partitions=2), "crash-worker")
    ctx = FlowContext(lake_root=lake_root, kafka_bootstrap=bootstrap, max_offsets_per_trigger=25, max_files_per_trigger=1)
    start_flow(spark, BY_NAME[flow_name], ctx, trigger={"processingTime": "0 seconds"}).awaitTermination()
