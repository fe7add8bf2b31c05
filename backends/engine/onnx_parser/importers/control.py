"""Importers: control."""
