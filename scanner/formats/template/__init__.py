"""Jinja chat templates."""
