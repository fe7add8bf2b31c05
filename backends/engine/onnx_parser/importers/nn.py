"""Importers: nn."""
