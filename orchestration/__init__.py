"""What the flows and tasks run on: the console display, the Prefect server, the
client runtime (local or Dask), DVC's repository lock and the dvc.lock recorder."""
