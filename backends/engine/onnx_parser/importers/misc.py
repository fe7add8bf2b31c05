"""Importers: misc."""
