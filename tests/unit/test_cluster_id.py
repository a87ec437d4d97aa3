"""KRaft cluster ids: the form `kafka-storage random-uuid` prints, and never one the storage tool reads as an option."""

from __future__ import annotations

import base64
import re
import uuid

from lakehouse.infra.kafka_broker import new_cluster_id


def test_cluster_ids_never_start_with_a_dash():
    """1 in 64 random base64url ids starts with '-', which StorageTool's parser takes for an option (a CI run hit it)."""
    ids = [new_cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert len(set(ids)) == len(ids)
    for cluster_id in ids[:100]:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
        uuid.UUID(bytes=base64.urlsafe_b64decode(cluster_id + "=="))   # decodes back to 16 bytes
