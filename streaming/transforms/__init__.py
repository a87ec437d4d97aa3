"""The transforms: one function per table, shared by the streaming and batch lanes."""
