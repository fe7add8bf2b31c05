"""Importers: sequence."""
