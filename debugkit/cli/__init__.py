"""The `debugkit` command line: one module per subtool."""
