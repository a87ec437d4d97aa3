"""Files under the lake root through Hadoop's FileSystem, so a local folder and an object store work alike."""

from __future__ import annotations

from pyspark.sql import SparkSession


def hadoop_fs(spark: SparkSession, path: str):
    """The Hadoop FileSystem that holds `path`, and the path as a Hadoop Path."""
    jpath = spark._jvm.org.apache.hadoop.fs.Path(path)
    return jpath.getFileSystem(spark._jsc.hadoopConfiguration()), jpath


def children(spark: SparkSession, folder: str, *, folders_only: bool = False) -> list[str]:
    """The full paths of what `folder` holds (nothing if it does not exist)."""
    fs, jpath = hadoop_fs(spark, folder)
    if not fs.exists(jpath):
        return []
    return [s.getPath().toString() for s in fs.listStatus(jpath) if s.isDirectory() or not folders_only]


def delete_tree(spark: SparkSession, path: str) -> None:
    """Delete a folder and everything in it."""
    fs, jpath = hadoop_fs(spark, path)
    fs.delete(jpath, True)
