"""The cluster side of GPU Portal: the Kubernetes adapter and the simulated cluster (``sim/``)."""
