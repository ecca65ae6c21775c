"""Scan layer: walk, sniff, dispatch, folder rules (reads the format registry)."""
