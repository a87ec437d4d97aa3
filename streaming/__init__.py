"""Transforms (pure DataFrame -> DataFrame functions) and the streaming lane that runs them."""
