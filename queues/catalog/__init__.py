"""The queue catalog: each queue's published terms and live numbers (free GPUs, waits,
estimates), as pages and as the read-only REST API."""
