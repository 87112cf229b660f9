from __future__ import annotations

import getpass
import hashlib
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queues.audit import AuditSource, audit_context
from queues.policy.apply import policy_apply
from queues.policy.parse import PolicyError


class Command(BaseCommand):
    help = (
        "Load GPU classes, capability classes, teams, queues, reservations, rate cards and "
        "fair-share settings from a policy YAML file (all or nothing)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="policy YAML file")
        parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
        parser.add_argument(
            "--prune",
            action="store_true",
            help="remove objects the file does not name (deactivate those still referenced)",
        )
        parser.add_argument(
            "--summary", action="store_true", help="print one line instead of every change"
        )

    def handle(
        self,
        *args: Any,
        file: Path,
        dry_run: bool,
        prune: bool,
        summary: bool = False,
        **options: Any,
    ) -> None:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from exc
        # No portal user runs a command: the entries name the file (and its content's digest,
        # to find the commit it came from) and who ran the command on this machine.
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        via = f"policy file {file.name} (sha256 {digest}) applied by {_os_user()}"
        try:
            with audit_context(actor=None, source=AuditSource.FILE, via=via):
                report = policy_apply(text=text, dry_run=dry_run, prune=prune)
        except PolicyError as exc:
            lines = "\n".join(f"  {problem}" for problem in exc.problems)
            raise CommandError(
                f"{file} was rejected, nothing was written "
                f"({len(exc.problems)} problem(s)):\n{lines}"
            ) from exc
        if summary:
            changes = len(report.changes)
            self.stdout.write(
                f"{file}: {changes} change(s){' (dry run)' if dry_run else ''}"
                if report.changed
                else f"{file}: no changes"
            )
            return
        self.stdout.write(report.render())


def _os_user() -> str:
    """Who ran the command on this machine (the login name, or the numeric id without one)."""
    try:
        return f"OS user {getpass.getuser()}"
    except (KeyError, OSError):
        return "an OS user without a name"
