"""Pipelines shipped with the project: the shop, the default (LAKEHOUSE_PIPELINE=lakehouse.pipelines.shop)."""
