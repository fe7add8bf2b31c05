"""Importers: elementwise."""
