"""Importers: tensor."""
