"""What a streaming or batch run needs to know about its surroundings, passed in explicitly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlowContext:
    """Addresses and tunables for running flows; built from the settings by the caller."""

    lake_root: str
    kafka_bootstrap: str
    silver_dedup_watermark: str = "1 hour"
    gold_watermark: str = "10 minutes"
    max_offsets_per_trigger: int = 0        # 0: no cap
    max_files_per_trigger: int = 0          # 0: Delta's default
