"""Fusion passes (filled in by the fusion work): each matches a pattern and rewrites nodes in place."""


def run_fusions(graph, config, logger) -> int:
    return 0
