"""Policy as code: parse a policy file (``parse``), write the database from it (``apply``, the one
door every policy write goes through) and read the database back in the same format
(``export``). See docs/policy.md."""
