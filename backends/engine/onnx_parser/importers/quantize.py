"""Importers: quantize."""
