"""Jobs as members see them: the request and its rules, submit, cancel, preview, checkpoints;
their reads, pages, forms and REST API."""
