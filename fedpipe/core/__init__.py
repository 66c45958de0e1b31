"""The bottom layer: errors with exit codes, the component registry, user-code
loading, derived seeds and deterministic files. Imports nothing else of fedpipe."""
