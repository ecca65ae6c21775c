"""Core layer: types and helpers every other layer shares (imports nothing above it)."""
