"""debugkit: the accuracy-debugging workbench over our builder/runtime core."""
__version__ = "0.1.0"
