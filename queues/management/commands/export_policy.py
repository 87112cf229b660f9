from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from queues.policy.export import dump_policy, policy_current


class Command(BaseCommand):
    help = "Write the current policy in apply_policy's format (export → apply changes nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", "-o", type=Path, help="file to write (default: stdout)")

    def handle(self, *args: Any, output: Path | None, **options: Any) -> None:
        text = dump_policy(policy_current())
        if output is None:
            self.stdout.write(text, ending="")
        else:
            output.write_text(text, encoding="utf-8")
            self.stderr.write(f"wrote {output}")
