"""Readers for public CTR logs, with the preprocessing their papers use."""
