"""Models and local training: the model zoo and user builders, the compiled
model runner, the one client trainer and vectorized cohorts, metrics, probes."""
