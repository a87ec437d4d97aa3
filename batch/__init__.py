"""The batch lane: bounded reads, backfill and replay over the same transforms (later issues)."""
