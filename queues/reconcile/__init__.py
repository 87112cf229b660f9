"""The reconcile: one cycle reads the cluster, syncs nodes, jobs and usage into the database,
builds the engine's snapshot, stores its plan and acts on it through the cluster adapter. The
Celery tasks that run it live in ``tasks``; a lease keeps it to one at a time."""
