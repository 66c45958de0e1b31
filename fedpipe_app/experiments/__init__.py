"""Many runs: sweeps over a grid of settings, and variants as DVC experiments."""
