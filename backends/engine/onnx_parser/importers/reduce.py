"""Importers: reduce."""
