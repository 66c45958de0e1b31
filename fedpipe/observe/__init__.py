"""Reading a run back: run files, history, status, the report, the doctor and
the lineage audit."""
