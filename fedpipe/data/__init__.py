"""Data: sources and ingest, validation (Great Expectations), partitioning into
clients, and the federated data a round reads."""
