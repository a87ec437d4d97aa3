"""Settings profiles: the LAKEHOUSE_* values of one kind of set-up, under whatever the environment sets itself."""

from __future__ import annotations

# Each profile is what a user would otherwise export by hand; a variable that is set wins over it.
PROFILES: dict[str, dict[str, str]] = {
    # One machine: Spark in the driver's JVM, one KRaft node, the lake in <home>/lake (every default).
    "local": {},
    # The three scale-out engines, as `lakehouse spark-cluster start`, `lakehouse kafka start --nodes 3` and
    # `lakehouse s3 start` serve them on this machine; point the same variables at real services instead.
    # S3 keys come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY only, never from a profile.
    "cluster": {
        "LAKEHOUSE_SPARK_MASTER": "spark://127.0.0.1:7077",
        "LAKEHOUSE_KAFKA_NODES": "3",
        "LAKEHOUSE_LAKE_ROOT": "s3a://lakehouse/lake",
        "LAKEHOUSE_S3_ENDPOINT": "http://127.0.0.1:9000",
        "LAKEHOUSE_S3_PATH_STYLE": "true",
    },
}
