"""Policy as code: parse and validate a policy YAML file into one normalized structure.

The same structure comes out of the database (``queues.policy.export.policy_current``), so applying,
diffing and exporting all compare like with like: a policy is a ``dict`` of sections, each a
``dict`` from an object's name to a ``dict`` of its fields in canonical Python values (``Decimal``
amounts, ``timedelta`` durations, sorted lists). Nothing here touches the database.

Validation is all-or-nothing: every problem found is collected, each naming the entry
(``queues[batch]``), the field and what is wrong, and ``PolicyError`` carries them all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import yaml

from portal.formatting import (
    NOT_ASCII_NUMBER,
    format_datetime,
    format_duration,
    is_ascii_number_text,
    parse_duration,
)
from portal.masking import looks_secret
from queues.admission.capability import (
    PRECISIONS,
    CapabilityRequest,
    GpuClassSpec,
    mig_profile_memory_gb,
    parse_share,
    resolve_capability,
)
from queues.admission.snapshot import borrowing_allowed
from queues.cluster.manifests import ENV_NAME, RESERVED_ENV_PREFIX
from queues.models import NAME, NAMESPACE_PATTERN, PortalRole, PreemptionClass, SharingMode
from queues.rates import GPU_AMOUNT_PLACES

SECTIONS = (
    "fair_share",
    "submissions",
    "gpu_classes",
    "capability_classes",
    "teams",
    "queues",
    "reservations",
    "node_pools",
    "rate_cards",
    "budgets",
    "roles",
)
# Sections whose objects are named and may be pruned, in the order they are written.
NAMED_SECTIONS = (
    "gpu_classes",
    "capability_classes",
    "teams",
    "queues",
    "reservations",
    "node_pools",
)
DEFAULT_USAGE_HALF_LIFE = timedelta(days=7)

# Matched on the whole string (fullmatch): with re.match and "$", "bob\n" would pass.
_NAMESPACE = re.compile(NAMESPACE_PATTERN)
_USERNAME = re.compile(r"[\w.@+-]{1,150}")
_CURRENCY = re.compile(r"[A-Z]{3}")

Policy = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    where: str
    field: str | None
    message: str

    def __str__(self) -> str:
        location = f"{self.where}.{self.field}" if self.field else self.where
        return f"{location}: {self.message}"


class PolicyError(Exception):
    """The policy file is invalid; ``problems`` lists every reason, nothing was written."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# --- Canonical values ----------------------------------------------------------------------------


# Whole digits the database keeps of each kind of number (queues.models: decimal columns'
# max_digits minus decimal_places; 32-bit integer columns).
AMOUNT_DIGITS = 7  # GPU-equivalents
WEIGHT_DIGITS = 5  # fair-share and rate-card weights
PRICE_DIGITS = 8
INT_MAX = 2_147_483_647


def _shown(value: Any) -> str:
    """A value as an error message shows it: never more than 40 characters of it."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}… ({len(text):,} characters)"


def parse_decimal(value: Any, *, digits: int = PRICE_DIGITS) -> Decimal:
    """A finite number with at most ``digits`` whole digits."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValueError(f"{_shown(value)} is not a number")
    if isinstance(value, str) and not is_ascii_number_text(value):
        raise ValueError(f"{_shown(value)}: {NOT_ASCII_NUMBER}")
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation as exc:
        raise ValueError(f"{_shown(value)} is not a number") from exc
    if not number.is_finite():
        raise ValueError(f"{_shown(value)} is not a finite number")
    if abs(number) >= 10**digits:
        raise ValueError(f"{_shown(value)} is too large (at most {10**digits - 1:,})")
    return number


def parse_weight(value: Any) -> Decimal:
    return parse_decimal(value, digits=WEIGHT_DIGITS)


def parse_gpu_amount(value: Any) -> Decimal:
    """GPU-equivalents: a number, or a fraction like ``"3/7"``, kept to three decimals."""
    if isinstance(value, str) and "/" in value:
        if not is_ascii_number_text(value):
            raise ValueError(f"{_shown(value)}: {NOT_ASCII_NUMBER}")
        try:
            fraction = Fraction(value.strip())
        except (ValueError, ZeroDivisionError) as exc:
            raise ValueError(f"{_shown(value)} is not a number or a fraction like '3/7'") from exc
        number = Decimal(fraction.numerator) / Decimal(fraction.denominator)
    else:
        number = parse_decimal(value, digits=AMOUNT_DIGITS)
    if abs(number) >= 10**AMOUNT_DIGITS:
        raise ValueError(f"{_shown(value)} is too large (at most {10**AMOUNT_DIGITS - 1:,})")
    return number.quantize(GPU_AMOUNT_PLACES)


def parse_datetime(value: Any) -> datetime:
    """An ISO 8601 timestamp with a time zone (YAML reads unquoted ones itself), as UTC."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(
                f"{_shown(value)} is not a timestamp like 2026-01-01T00:00:00Z"
            ) from exc
    elif isinstance(value, date):
        raise ValueError(f"{value} is a date; give a time and zone, e.g. {value}T00:00:00Z")
    else:
        raise ValueError(f"{_shown(value)} is not a timestamp like 2026-01-01T00:00:00Z")
    if parsed.tzinfo is None:
        raise ValueError(f"{value} has no time zone; add one, e.g. 'Z' for UTC")
    return parsed.astimezone(UTC)


def canonical_share(value: Any) -> str:
    share = parse_share(value)
    return f"{share.numerator}/{share.denominator}" if share.denominator != 1 else "1"


def sorted_precisions(values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=lambda p: (PRECISIONS.index(p) if p in PRECISIONS else 99, p))


# --- Reading the file ----------------------------------------------------------------------------


# Bounds on a policy file, checked before and while it is read: a real policy is a few hundred
# lines, nested four deep, with descriptions of a sentence or two.
MAX_POLICY_BYTES = 1_000_000
MAX_POLICY_DEPTH = 12
MAX_POLICY_TEXT = 10_000  # characters in one string
# Bits of the largest integer read (about 4,200 decimal digits): Python prints no larger one in
# decimal, and hexadecimal or octal would otherwise slip past YAML's own digit limit.
MAX_POLICY_INT_BITS = 14_000


class _PolicyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing aliases and nesting deeper than ``MAX_POLICY_DEPTH``.

    An alias (``*name``) lets a few lines expand to billions of values (the "billion laughs");
    a policy never needs one. Nesting is refused while composing, before Python's recursion
    limit is reached."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases (*{event.anchor}) are not accepted: write the value out",
                event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_POLICY_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested more than {MAX_POLICY_DEPTH} levels deep",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        """A scalar YAML reads but Python cannot hold (a 5,000-digit integer, 2026-02-30) is a
        problem at its line and column, not a traceback."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, _unreadable(node, exc), node.start_mark
            ) from exc


def _unreadable(node: Any, exc: Exception) -> str:
    shown = _shown(node.value) if isinstance(node.value, str) else "this value"
    kind = str(node.tag).rsplit(":", 1)[-1]
    if kind == "int":
        return f"{shown} is not a number the policy can hold"
    if kind == "timestamp":
        return f"{shown} is not a real date ({exc})"
    return f"{shown} cannot be read ({exc})"


def load_policy_text(text: str) -> Any:
    """YAML → plain data; a syntax error names its line and column. Refuses a file over
    ``MAX_POLICY_BYTES``, aliases, nesting deeper than ``MAX_POLICY_DEPTH``, strings over
    ``MAX_POLICY_TEXT`` characters and numbers that are not finite (``.nan``, ``.inf``, ``1e400``),
    each naming where."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_POLICY_BYTES:
        raise PolicyError(
            [Problem("yaml", None, f"the file is {size:,} bytes; at most {MAX_POLICY_BYTES:,}")]
        )
    try:
        data = yaml.load(text, Loader=_PolicyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        # A value YAML reads but Python cannot hold is no syntax error: say only where it is.
        kind = "at" if isinstance(exc, yaml.constructor.ConstructorError) else "syntax error at"
        raise PolicyError([Problem("yaml", None, f"{kind} {where}: {exc.problem}")]) from exc
    except yaml.YAMLError as exc:
        raise PolicyError([Problem("yaml", None, f"syntax error: {exc}")]) from exc
    except RecursionError as exc:  # the depth cap should come first; never a traceback
        raise PolicyError([Problem("yaml", None, "nested too deeply")]) from exc
    problems = list(_value_problems(data, "yaml"))
    if problems:
        raise PolicyError(problems)
    return data


def _value_problems(value: Any, where: str) -> Iterable[Problem]:
    """Oversized strings and non-finite numbers anywhere in the loaded data, each named by where
    it sits (``queues[batch].description``, ``teams[2]``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and len(key) > MAX_POLICY_TEXT:
                yield Problem(where, None, f"a key of {len(key):,} characters")
                continue
            if isinstance(key, str) and "\x00" in key:
                yield Problem(where, None, f"the key {_shown(key)} contains a NUL character")
                continue
            yield from _value_problems(item, f"{where}.{key}" if where != "yaml" else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            name = item.get("name") if isinstance(item, dict) else None
            label = name if isinstance(name, str) and len(name) <= 100 else index
            yield from _value_problems(item, f"{where}[{label}]")
    elif isinstance(value, str) and len(value) > MAX_POLICY_TEXT:
        yield Problem(
            where, None, f"{len(value):,} characters; at most {MAX_POLICY_TEXT:,} in one value"
        )
    elif isinstance(value, str) and "\x00" in value:
        yield Problem(where, None, f"{_shown(value)} contains a NUL character")
    elif isinstance(value, int) and value.bit_length() > MAX_POLICY_INT_BITS:
        yield Problem(where, None, "a number larger than any the policy holds")
    elif isinstance(value, float) and not math.isfinite(value):
        yield Problem(where, None, f"{value} is not a finite number")


class _Entry:
    """Reads one mapping of the file, recording problems under its name instead of raising."""

    def __init__(self, where: str, data: Mapping[str, Any], problems: list[Problem]) -> None:
        self.where = where
        self.data = data
        self.problems = problems

    def problem(self, field: str | None, message: str) -> None:
        self.problems.append(Problem(self.where, field, message))

    def check_fields(self, allowed: Iterable[str]) -> None:
        allowed = set(allowed)
        for key in self.data:
            if key not in allowed:
                self.problem(
                    str(key), f"unknown field (expected one of: {', '.join(sorted(allowed))})"
                )

    def get(
        self,
        field: str,
        convert: Callable[[Any], Any],
        *,
        default: Any = ...,
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        if field not in self.data or self.data[field] is None:
            if default is ...:
                self.problem(field, "required")
                return None
            return default
        try:
            value = convert(self.data[field])
        except (ValueError, TypeError) as exc:
            self.problem(field, str(exc))
            return None
        if check is not None:
            message = check(value)
            if message:
                self.problem(field, message)
                return None
        return value


def _text(value: Any) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(f"{_shown(value)} is not text")
    return str(value).strip()


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{_shown(value)} is not a whole number")
    if abs(value) > INT_MAX:
        raise ValueError(f"{_shown(value)} is too large (at most {INT_MAX:,})")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{_shown(value)} is not true or false")
    return value


def _name_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{_shown(value)} is not a list of names")
    return sorted(set(value))


def _number_text(value: Any) -> str:
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    return str(value)


def _positive(value: Any) -> str | None:
    return None if value > 0 else f"must be greater than 0 (got {_number_text(value)})"


def _not_negative(value: Any) -> str | None:
    return None if value >= 0 else f"must not be negative (got {_number_text(value)})"


def _positive_duration(value: timedelta) -> str | None:
    return None if value > timedelta(0) else "must be longer than 0s"


def _named_entries(
    data: Mapping[str, Any], section: str, problems: list[Problem], pattern: re.Pattern[str]
) -> list[tuple[str, _Entry]]:
    """The section's entries with valid, unique names; problems for the rest."""
    raw = data.get(section) or []
    if not isinstance(raw, list):
        problems.append(Problem(section, None, "must be a list of entries"))
        return []
    entries: list[tuple[str, _Entry]] = []
    seen: dict[str, int] = {}
    for position, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            problems.append(Problem(f"{section}[#{position}]", None, "must be a mapping of fields"))
            continue
        name = item.get("name")
        if not isinstance(name, str) or not pattern.fullmatch(name):
            problems.append(
                Problem(
                    f"{section}[#{position}]",
                    "name",
                    f"{name!r} is not a valid name (lowercase letters, digits, '-', '.')"
                    if name is not None
                    else "required",
                )
            )
            continue
        if name in seen:
            problems.append(
                Problem(
                    f"{section}[{name}]",
                    "name",
                    f"duplicate name (entries #{seen[name]} and #{position})",
                )
            )
            continue
        seen[name] = position
        entries.append((name, _Entry(f"{section}[{name}]", item, problems)))
    return entries


def parse_policy(data: Any, *, existing: Policy | None = None) -> Policy:
    """Validate plain data from a policy file; returns the normalized policy or raises PolicyError.

    Only the sections present in the file are returned: the file is the source of truth for what
    it names, and leaves the rest alone. ``existing`` (the database's current policy) resolves
    references to sections the file leaves out.
    """
    problems: list[Problem] = []
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError([Problem("policy", None, "the file must be a mapping of sections")])
    for key in data:
        if key not in SECTIONS:
            problems.append(
                Problem(str(key), None, f"unknown section (expected: {', '.join(SECTIONS)})")
            )
    policy: Policy = {}

    if "fair_share" in data:
        raw = data["fair_share"]
        if isinstance(raw, dict):
            entry = _Entry("fair_share", raw, problems)
            entry.check_fields(["usage_half_life"])
            policy["fair_share"] = {
                "usage_half_life": entry.get(
                    "usage_half_life", parse_duration, check=_positive_duration
                )
            }
        else:
            problems.append(Problem("fair_share", None, "must be a mapping"))

    submissions = (
        _parse_submissions(data["submissions"], problems) if "submissions" in data else None
    )
    if submissions is not None:
        policy["submissions"] = submissions

    # References resolve against the file's own section, or, where the file leaves a section out,
    # against what the database already holds.
    existing = existing or {}

    def known(section: str) -> dict[str, Any]:
        found: dict[str, Any] = policy[section] if section in policy else existing.get(section, {})
        return found

    if "gpu_classes" in data:
        policy["gpu_classes"] = _parse_gpu_classes(data, problems)
    if "capability_classes" in data:
        policy["capability_classes"] = _parse_capability_classes(data, problems)
    if "teams" in data:
        policy["teams"] = _parse_teams(data, problems, set(known("gpu_classes")))
    if "queues" in data:
        policy["queues"] = _parse_queues(
            data, problems, known("gpu_classes"), known("capability_classes"), set(known("teams"))
        )
    if "reservations" in data:
        policy["reservations"] = _parse_reservations(
            data, problems, set(known("gpu_classes")), set(known("teams")), known("queues")
        )
    if "node_pools" in data:
        policy["node_pools"] = _parse_node_pools(
            data, problems, known("gpu_classes"), set(known("queues"))
        )
    if "rate_cards" in data:
        policy["rate_cards"] = _parse_rate_cards(data, problems, set(known("gpu_classes")))
    if "budgets" in data:
        budgets = _parse_budgets(data["budgets"], problems, known("teams"))
        if budgets is not None:
            policy["budgets"] = budgets
    if "roles" in data:
        policy["roles"] = _parse_roles(data, problems)
    if problems:
        raise PolicyError(problems)
    return policy


def _parse_submissions(raw: Any, problems: list[Problem]) -> dict[str, Any] | None:
    """``submissions``: rules on what a job may carry. ``plain_env_names_allowed`` lists the
    environment variable names that look secret (``portal.masking``) but may carry a plain
    value, e.g. ``HF_TOKEN_PATH``; every other such name must reference a Kubernetes Secret."""
    if not isinstance(raw, dict):
        problems.append(Problem("submissions", None, "must be a mapping"))
        return None
    entry = _Entry("submissions", raw, problems)
    entry.check_fields(["plain_env_names_allowed"])
    names = raw.get("plain_env_names_allowed")
    if names is None:
        return {"plain_env_names_allowed": []}
    field = "plain_env_names_allowed"
    if not isinstance(names, list):
        entry.problem(field, f"{_shown(names)} is not a list of environment variable names")
        return None
    allowed: set[str] = set()
    for index, name in enumerate(names):
        at = f"{field}[{index}]"
        if not isinstance(name, str):
            entry.problem(at, f"{_shown(name)} is not text")
        elif not ENV_NAME.fullmatch(name) or len(name) > 256:
            entry.problem(
                at,
                f"{_shown(name)} is not a valid environment variable name (letters, digits, "
                "'_', '-', '.'; not starting with a digit)",
            )
        elif name.startswith(RESERVED_ENV_PREFIX):
            entry.problem(at, f"{name} is reserved: the portal sets {RESERVED_ENV_PREFIX}…")
        elif not looks_secret(name):
            entry.problem(
                at, f"{name} does not look secret: it may carry a plain value without this"
            )
        elif name in allowed:
            entry.problem(at, f"{name} is listed twice")
        else:
            allowed.add(name)
    return {"plain_env_names_allowed": sorted(allowed)}


def _parse_gpu_classes(data: Mapping[str, Any], problems: list[Problem]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    products: dict[str, str] = {}
    for name, entry in _named_entries(data, "gpu_classes", problems, NAME):
        entry.check_fields(
            [
                "name",
                "product",
                "description",
                "hbm_gb",
                "precisions",
                "mig_profiles",
                "rdma",
                "tier",
            ]
        )
        product = entry.get("product", _text)
        if product:
            if product in products:
                entry.problem(
                    "product", f"{product!r} is already the product of {products[product]}"
                )
            products[product] = name
        result[name] = {
            "product": product,
            "description": entry.get("description", _text, default=""),
            "hbm_gb": entry.get("hbm_gb", _int, check=_positive),
            "precisions": entry.get("precisions", _precisions, default=[]),
            "mig_profiles": entry.get("mig_profiles", _mig_profiles, default={}),
            "rdma": entry.get("rdma", _bool, default=False),
            "tier": entry.get("tier", _int, default=1, check=_positive),
        }
    return result


def _precisions(value: Any) -> list[str]:
    names = _name_list(value)
    unknown = [p for p in names if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown precision {', '.join(unknown)} (known: {', '.join(PRECISIONS)})")
    return sorted_precisions(names)


def _mig_profiles(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("must map MIG profile names to their share of the GPU, e.g. 1g.10gb: 1/7")
    profiles = {}
    for profile, share in value.items():
        mig_profile_memory_gb(str(profile))
        try:
            profiles[str(profile)] = canonical_share(share)
        except ValueError as exc:
            raise ValueError(f"{profile}: {exc}") from exc
    return dict(sorted(profiles.items()))


def _mig_profile_name(value: Any) -> str:
    text = _text(value)
    mig_profile_memory_gb(text)
    return text


def _parse_capability_classes(data: Mapping[str, Any], problems: list[Problem]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, entry in _named_entries(data, "capability_classes", problems, NAME):
        entry.check_fields(
            ["name", "description", "min_hbm_gb", "precisions", "mig_profile", "rdma", "min_tier"]
        )
        result[name] = {
            "description": entry.get("description", _text, default=""),
            "min_hbm_gb": entry.get("min_hbm_gb", _int, default=0, check=_not_negative),
            "precisions": entry.get("precisions", _precisions, default=[]),
            "mig_profile": entry.get("mig_profile", _mig_profile_name, default=""),
            "rdma": entry.get("rdma", _bool, default=False),
            "min_tier": entry.get("min_tier", _int, default=0, check=_not_negative),
        }
    return result


def _usernames(value: Any) -> list[str]:
    names = _name_list(value)
    bad = [n for n in names if not _USERNAME.fullmatch(n)]
    if bad:
        raise ValueError(f"not a valid username: {', '.join(bad)}")
    return names


# An identity provider's group name, as its groups claim or LDAP's group names spell it
# ("gpu-nlp", "/org/gpu-nlp", a GUID): any text without surrounding blanks, matched exactly.
MAX_GROUP_NAME = 256


def _group_names(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{_shown(value)} is not a list of group names")
    bad = [g for g in value if not g or g != g.strip() or len(g) > MAX_GROUP_NAME]
    if bad:
        raise ValueError(
            f"not a group name: {', '.join(_shown(g) for g in bad)} (group names are matched "
            f"exactly: no blanks around them, 1 to {MAX_GROUP_NAME} characters)"
        )
    return sorted(set(value))


def no_roles() -> dict[str, Any]:
    """The ``roles`` section that gives no role to any group (what a database without one
    holds)."""
    return {role.value: {"groups": []} for role in PortalRole}


def _parse_roles(data: Mapping[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """``roles: {finance: {groups: [...]}, admin: {groups: [...]}}``: the identity-provider
    groups that give each role. The section is the whole mapping: a role it leaves out is given
    by no group."""
    raw = data["roles"]
    result = no_roles()
    if raw is None:
        return result
    if not isinstance(raw, dict):
        problems.append(Problem("roles", None, "must be a mapping of roles to {groups: [...]}"))
        return result
    for role, fields in raw.items():
        if role not in result:
            problems.append(
                Problem(
                    f"roles[{role}]",
                    None,
                    f"unknown role (expected one of: {', '.join(sorted(result))})",
                )
            )
            continue
        if not isinstance(fields, dict):
            problems.append(Problem(f"roles[{role}]", None, "must be a mapping {groups: [...]}"))
            continue
        entry = _Entry(f"roles[{role}]", fields, problems)
        entry.check_fields(["groups"])
        result[role] = {"groups": entry.get("groups", _group_names, default=[]) or []}
    return result


def _parse_teams(
    data: Mapping[str, Any], problems: list[Problem], gpu_names: set[str]
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    namespaces: dict[str, str] = {}
    for name, entry in _named_entries(data, "teams", problems, NAME):
        entry.check_fields(
            [
                "name",
                "description",
                "namespace",
                "cost_center",
                "fair_share_weight",
                "members",
                "groups",
                "quotas",
            ]
        )
        namespace = entry.get(
            "namespace",
            _text,
            check=lambda v: (
                None
                if _NAMESPACE.fullmatch(v)
                else f"{v!r} is not a DNS label (lowercase letters, digits, '-', at most 63)"
            ),
        )
        if namespace:
            if namespace in namespaces:
                entry.problem(
                    "namespace",
                    f"{namespace!r} is already the namespace of team {namespaces[namespace]}",
                )
            namespaces[namespace] = name
        quotas: dict[str, Any] = {}
        raw_quotas = entry.data.get("quotas") or {}
        if not isinstance(raw_quotas, dict):
            entry.problem("quotas", "must map GPU class names to {nominal, borrowing_limit}")
            raw_quotas = {}
        for gpu_class, raw in raw_quotas.items():
            field = f"quotas.{gpu_class}"
            if gpu_class not in gpu_names:
                entry.problem(field, f"unknown GPU class {gpu_class!r}")
                continue
            if not isinstance(raw, dict):
                entry.problem(field, "must be a mapping {nominal: N, borrowing_limit: M}")
                continue
            quota = _Entry(entry.where, {f"{field}.{k}": v for k, v in raw.items()}, problems)
            quota.check_fields([f"{field}.nominal", f"{field}.borrowing_limit"])
            quotas[gpu_class] = {
                "nominal": quota.get(f"{field}.nominal", parse_gpu_amount, check=_not_negative),
                "borrowing_limit": quota.get(
                    f"{field}.borrowing_limit",
                    parse_gpu_amount,
                    default=Decimal("0.000"),
                    check=_not_negative,
                ),
            }
        result[name] = {
            "description": entry.get("description", _text, default=""),
            "namespace": namespace,
            "cost_center": entry.get("cost_center", _text),
            "fair_share_weight": entry.get(
                "fair_share_weight", parse_weight, default=Decimal(1), check=_positive
            ),
            "members": entry.get("members", _usernames, default=[]),
            "groups": entry.get("groups", _group_names, default=[]),
            "quotas": dict(sorted(quotas.items())),
        }
    return result


QUEUE_FIELDS = (
    "name",
    "description",
    "priority",
    "expected_wait_target",
    "max_runtime",
    "default_runtime",
    "preemption_class",
    "grace_period",
    "sharing_mode",
    "allowed_gpu_classes",
    "allowed_capability_classes",
    "checkpoint_interval",
    "max_gpus_per_job",
    "max_running_jobs_per_user",
    "max_gpus_per_user",
    "job_priority",
    "teams",
    "may_borrow",
    "reservation_only",
    "required_topology",
)
PREEMPTION_CLASSES = tuple(PreemptionClass.values)
SHARING_MODES = tuple(SharingMode.values)
TOPOLOGIES = ("", "rack", "network_domain")


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        text = _text(value)
        if text not in options:
            raise ValueError(f"{text!r} is not one of: {', '.join(o for o in options if o)}")
        return text

    return convert


def _parse_queues(
    data: Mapping[str, Any],
    problems: list[Problem],
    gpu_classes: Mapping[str, Any],
    capability_classes: Mapping[str, Any],
    team_names: set[str],
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, entry in _named_entries(data, "queues", problems, NAME):
        entry.check_fields(QUEUE_FIELDS)
        preemption = entry.get("preemption_class", _choice(PREEMPTION_CLASSES))
        sharing = entry.get("sharing_mode", _choice(SHARING_MODES))
        max_runtime = entry.get("max_runtime", parse_duration, check=_positive_duration)
        default_runtime = entry.get("default_runtime", parse_duration, check=_positive_duration)
        if max_runtime and default_runtime and default_runtime > max_runtime:
            entry.problem(
                "default_runtime",
                f"{format_duration(default_runtime)} is longer than max_runtime "
                f"{format_duration(max_runtime)}",
            )
        grace = entry.get("grace_period", parse_duration, default=None, check=_positive_duration)
        checkpoint = entry.get(
            "checkpoint_interval", parse_duration, default=None, check=_positive_duration
        )
        if (
            preemption in (PreemptionClass.GRACEFUL, PreemptionClass.PREEMPTIBLE)
            and checkpoint is None
            and (
                "checkpoint_interval" not in entry.data or entry.data["checkpoint_interval"] is None
            )
        ):
            entry.problem(
                "checkpoint_interval",
                f"required: a {preemption} queue's jobs are preempted, so they must checkpoint",
            )
        if (
            preemption == PreemptionClass.GRACEFUL
            and grace is None
            and entry.data.get("grace_period") is None
        ):
            entry.problem("grace_period", "required for the graceful preemption class")
        if preemption != PreemptionClass.GRACEFUL and grace is not None:
            entry.problem(
                "grace_period", f"only a graceful queue has a grace period, not {preemption}"
            )
        may_borrow = entry.get("may_borrow", _bool, default=False)
        if may_borrow and not borrowing_allowed(may_borrow=True, preemption=preemption):
            entry.problem(
                "may_borrow",
                "only graceful or preemptible queues may borrow: lenders reclaim borrowed GPUs "
                "by preempting",
            )
        allowed_gpus = entry.get("allowed_gpu_classes", _name_list, check=_non_empty)
        for gpu in allowed_gpus or []:
            if gpu not in gpu_classes:
                entry.problem("allowed_gpu_classes", f"unknown GPU class {gpu!r}")
        allowed_caps = entry.get("allowed_capability_classes", _name_list, check=_non_empty)
        for cap in allowed_caps or []:
            if cap not in capability_classes:
                entry.problem("allowed_capability_classes", f"unknown capability class {cap!r}")
        if sharing and allowed_caps:
            _check_sharing(
                entry, sharing, allowed_caps, allowed_gpus or [], gpu_classes, capability_classes
            )
        teams = entry.get("teams", _name_list, default=[])
        for team in teams or []:
            if team not in team_names:
                entry.problem("teams", f"unknown team {team!r}")
        job_priority = _job_priority(entry)
        result[name] = {
            "description": entry.get("description", _text, default=""),
            "priority": entry.get("priority", _int, default=0),
            "expected_wait_target": entry.get(
                "expected_wait_target", parse_duration, check=_positive_duration
            ),
            "max_runtime": max_runtime,
            "default_runtime": default_runtime,
            "preemption_class": preemption,
            "grace_period": grace,
            "sharing_mode": sharing,
            "allowed_gpu_classes": allowed_gpus,
            "allowed_capability_classes": allowed_caps,
            "checkpoint_interval": checkpoint,
            "max_gpus_per_job": entry.get("max_gpus_per_job", parse_gpu_amount, check=_positive),
            "max_running_jobs_per_user": entry.get(
                "max_running_jobs_per_user", _int, default=None, check=_positive
            ),
            "max_gpus_per_user": entry.get(
                "max_gpus_per_user", parse_gpu_amount, default=None, check=_positive
            ),
            "job_priority": job_priority,
            "teams": teams,
            "may_borrow": may_borrow,
            "reservation_only": entry.get("reservation_only", _bool, default=False),
            "required_topology": entry.get("required_topology", _choice(TOPOLOGIES), default=""),
        }
    return result


def _non_empty(value: list[str]) -> str | None:
    return None if value else "must name at least one"


def _job_priority(entry: _Entry) -> dict[str, int]:
    raw = entry.data.get("job_priority")
    if raw is None:
        return {"min": 0, "default": 0, "max": 0}
    if not isinstance(raw, dict):
        entry.problem("job_priority", "must be a mapping {min, default, max}")
        return {"min": 0, "default": 0, "max": 0}
    bounds = {}
    for key in ("min", "default", "max"):
        value = raw.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            entry.problem(f"job_priority.{key}", f"{_shown(value)} is not a whole number")
            value = 0
        bounds[key] = value
    for key in raw:
        if key not in bounds:
            entry.problem(
                f"job_priority.{key}", "unknown field (expected one of: default, max, min)"
            )
    if not bounds["min"] <= bounds["default"] <= bounds["max"]:
        entry.problem(
            "job_priority",
            "needs min ≤ default ≤ max "
            f"(got {bounds['min']}, {bounds['default']}, {bounds['max']})",
        )
    return bounds


def _check_sharing(
    entry: _Entry,
    sharing: str,
    allowed_caps: list[str],
    allowed_gpus: list[str],
    gpu_classes: Mapping[str, Any],
    capability_classes: Mapping[str, Any],
) -> None:
    """A queue's capability classes must fit its sharing mode and match an allowed GPU class."""
    specs = [gpu_class_spec(g, gpu_classes[g]) for g in allowed_gpus if g in gpu_classes]
    for cap in allowed_caps:
        if cap not in capability_classes:
            continue
        fields = capability_classes[cap]
        if fields["mig_profile"] and sharing != SharingMode.MIG:
            entry.problem(
                "allowed_capability_classes",
                f"capability class {cap} asks for MIG profile {fields['mig_profile']}, "
                f"but the queue's sharing mode is {sharing}",
            )
            continue
        if sharing == SharingMode.MIG and not fields["mig_profile"]:
            entry.problem(
                "allowed_capability_classes",
                f"capability class {cap} names no MIG profile, but the queue hands out MIG slices",
            )
            continue
        if specs and None not in (fields["min_hbm_gb"], fields["min_tier"]):
            resolution = resolve_capability(capability_request(cap, fields), specs)
            if not resolution.matches:
                why = "; ".join(
                    f"{g}: {resolution.why_not(g)}" for g in allowed_gpus if g in gpu_classes
                )
                entry.problem(
                    "allowed_capability_classes",
                    f"capability class {cap} matches none of the queue's GPU classes ({why})",
                )


def gpu_class_spec(name: str, fields: Mapping[str, Any]) -> GpuClassSpec:
    return GpuClassSpec(
        name=name,
        hbm_gb=fields["hbm_gb"] or 0,
        precisions=frozenset(fields["precisions"] or ()),
        mig_profiles={p: parse_share(s) for p, s in (fields["mig_profiles"] or {}).items()},
        rdma=bool(fields["rdma"]),
        tier=fields["tier"] or 0,
    )


def capability_request(name: str, fields: Mapping[str, Any]) -> CapabilityRequest:
    return CapabilityRequest(
        name=name,
        min_hbm_gb=fields["min_hbm_gb"] or 0,
        precisions=frozenset(fields["precisions"] or ()),
        mig_profile=fields["mig_profile"] or None,
        rdma=bool(fields["rdma"]),
        min_tier=fields["min_tier"] or 0,
    )


def _parse_reservations(
    data: Mapping[str, Any],
    problems: list[Problem],
    gpu_names: set[str],
    team_names: set[str],
    queues: Mapping[str, Any],
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, entry in _named_entries(data, "reservations", problems, NAME):
        entry.check_fields(["name", "team", "queue", "gpu_class", "amount", "starts_at", "ends_at"])
        team = entry.get("team", _text)
        if team and team not in team_names:
            entry.problem("team", f"unknown team {team!r}")
        queue = entry.get("queue", _text, default=None)
        if queue is not None:
            if queue not in queues:
                entry.problem("queue", f"unknown queue {queue!r}")
            elif team and team not in (queues[queue]["teams"] or []):
                entry.problem("queue", f"team {team} may not submit to queue {queue}")
        gpu_class = entry.get("gpu_class", _text)
        if gpu_class and gpu_class not in gpu_names:
            entry.problem("gpu_class", f"unknown GPU class {gpu_class!r}")
        elif (
            gpu_class
            and queue in queues
            and gpu_class not in (queues[queue]["allowed_gpu_classes"] or [])
        ):
            entry.problem("gpu_class", f"queue {queue} does not allow GPU class {gpu_class}")
        starts_at = entry.get("starts_at", parse_datetime, default=None)
        ends_at = entry.get("ends_at", parse_datetime, default=None)
        has_start = entry.data.get("starts_at") is not None
        has_end = entry.data.get("ends_at") is not None
        if has_start != has_end:
            entry.problem(
                "ends_at" if has_start else "starts_at",
                "a window needs both starts_at and ends_at (leave both out for a standing "
                "reservation)",
            )
        elif starts_at and ends_at and ends_at <= starts_at:
            entry.problem(
                "ends_at",
                f"{format_datetime(ends_at)} is not after starts_at {format_datetime(starts_at)}",
            )
        result[name] = {
            "team": team,
            "queue": queue,
            "gpu_class": gpu_class,
            "amount": entry.get("amount", parse_gpu_amount, check=_positive),
            "starts_at": starts_at,
            "ends_at": ends_at,
        }
    return result


def _parse_rate_cards(
    data: Mapping[str, Any], problems: list[Problem], gpu_names: set[str]
) -> dict[str, Any]:
    raw = data.get("rate_cards") or []
    if not isinstance(raw, list):
        problems.append(Problem("rate_cards", None, "must be a list of entries"))
        return {}
    result: dict[str, Any] = {}
    for position, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            problems.append(
                Problem(f"rate_cards[#{position}]", None, "must be a mapping of fields")
            )
            continue
        try:
            effective = parse_datetime(item.get("effective_from"))
        except ValueError as exc:
            problems.append(Problem(f"rate_cards[#{position}]", "effective_from", str(exc)))
            continue
        key = format_datetime(effective)
        entry = _Entry(f"rate_cards[{key}]", item, problems)
        if key in result:
            entry.problem(
                "effective_from", "duplicate: two rate cards take effect at the same time"
            )
            continue
        entry.check_fields(
            ["effective_from", "currency", "price_per_normalized_gpu_hour", "weights", "note"]
        )
        weights: dict[str, Decimal] = {}
        raw_weights = item.get("weights")
        if not isinstance(raw_weights, dict) or not raw_weights:
            entry.problem("weights", "required: a billing weight per GPU class")
            raw_weights = {}
        for gpu_class, weight in raw_weights.items():
            if gpu_class not in gpu_names:
                entry.problem(f"weights.{gpu_class}", f"unknown GPU class {gpu_class!r}")
                continue
            try:
                value = parse_weight(weight)
            except ValueError as exc:
                entry.problem(f"weights.{gpu_class}", str(exc))
                continue
            if value <= 0:
                entry.problem(f"weights.{gpu_class}", f"must be greater than 0 (got {value})")
                continue
            weights[gpu_class] = value
        result[key] = {
            "effective_from": effective,
            "currency": entry.get(
                "currency",
                _text,
                check=lambda v: (
                    None
                    if _CURRENCY.fullmatch(v)
                    else f"{v!r} is not a three-letter currency code like EUR"
                ),
            ),
            "price_per_normalized_gpu_hour": entry.get(
                "price_per_normalized_gpu_hour", parse_decimal, check=_not_negative
            ),
            "note": entry.get("note", _text, default=""),
            "weights": dict(sorted(weights.items())),
        }
    if result and gpu_names:
        newest_key = max(result, key=lambda k: result[k]["effective_from"])
        missing = sorted(gpu_names - set(result[newest_key]["weights"]))
        if missing:
            problems.append(
                Problem(
                    f"rate_cards[{newest_key}]",
                    "weights",
                    "the newest rate card must weigh every GPU class; "
                    f"missing: {', '.join(missing)}",
                )
            )
    return dict(sorted(result.items()))


_MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")
BUDGET_DIGITS = 12
CENT = Decimal("0.01")
BUDGET_SCOPES = {"teams": "team", "cost_centers": "cost center"}


def no_budgets() -> dict[str, Any]:
    return {"currency": "", "teams": {}, "cost_centers": {}}


def _parse_budgets(
    raw: Any, problems: list[Problem], teams: Mapping[str, Any]
) -> dict[str, Any] | None:
    """``budgets``: money per month for teams and cost centers, in one currency::

        budgets:
          currency: EUR
          teams:
            vision: 900                                   # every month
            nlp: {monthly: 1500, months: {2026-12: 1800}} # December's own
          cost_centers:
            CC-2001: {monthly: 400}

    A team must be one the policy names, a cost center one of its teams'. The section replaces
    the budgets the database holds."""
    if raw is None:
        return no_budgets()
    if not isinstance(raw, dict):
        problems.append(Problem("budgets", None, "must be a mapping"))
        return None
    entry = _Entry("budgets", raw, problems)
    entry.check_fields(["currency", *BUDGET_SCOPES])
    result = no_budgets()
    result["currency"] = entry.get(
        "currency",
        _text,
        check=lambda v: (
            None
            if _CURRENCY.fullmatch(v)
            else f"{v!r} is not a three-letter currency code like EUR"
        ),
    )
    centers = {str(fields.get("cost_center", "")) for fields in teams.values()} - {""}
    for scope, word in BUDGET_SCOPES.items():
        named = raw.get(scope)
        if named is None:
            continue
        if not isinstance(named, dict):
            entry.problem(scope, f"must be a mapping of {word} → budget")
            continue
        for name, value in named.items():
            where = f"{scope}.{name}"
            if scope == "teams" and name not in teams:
                entry.problem(where, f"unknown team {name!r}")
                continue
            if scope == "cost_centers" and name not in centers:
                entry.problem(
                    where,
                    f"no team has cost center {name!r} (known: {', '.join(sorted(centers))})",
                )
                continue
            budget = _budget(value, where, entry)
            if budget is not None:
                result[scope][str(name)] = budget
        result[scope] = dict(sorted(result[scope].items()))
    return result


def _budget(value: Any, where: str, entry: _Entry) -> dict[str, Any] | None:
    """One budget: an amount (every month) or ``{monthly: …, months: {YYYY-MM: …}}``."""
    if not isinstance(value, dict):
        value = {"monthly": value}
    unknown = sorted(str(k) for k in value if k not in ("monthly", "months"))
    if unknown:
        entry.problem(f"{where}.{unknown[0]}", "unknown field (expected one of: monthly, months)")
        return None

    def amount(raw: Any, at: str) -> Decimal | None:
        try:
            parsed = parse_decimal(raw, digits=BUDGET_DIGITS)
        except ValueError as exc:
            entry.problem(at, str(exc))
            return None
        if parsed != parsed.quantize(CENT):
            entry.problem(at, f"{parsed} has more than two decimal places: give it to the cent")
            return None
        if parsed <= 0:
            entry.problem(at, f"must be greater than 0 (got {parsed})")
            return None
        return parsed

    monthly = None
    if value.get("monthly") is not None:
        monthly = amount(value["monthly"], f"{where}.monthly")
        if monthly is None:
            return None
    months: dict[str, Decimal] = {}
    raw_months = value.get("months") or {}
    if not isinstance(raw_months, dict):
        entry.problem(f"{where}.months", "must be a mapping of YYYY-MM → amount")
        return None
    for month, raw in raw_months.items():
        if not isinstance(month, str) or not _MONTH.fullmatch(month):
            entry.problem(f"{where}.months.{month}", "is not a month: write it as YYYY-MM")
            return None
        parsed = amount(raw, f"{where}.months.{month}")
        if parsed is None:
            return None
        months[month] = parsed
    if monthly is None and not months:
        entry.problem(where, "required: an amount, or monthly and/or months")
        return None
    return {"monthly": monthly, "months": dict(sorted(months.items()))}


NODE_POOL_FIELDS = (
    "name",
    "description",
    "gpu_class",
    "min_nodes",
    "max_nodes",
    "node",
    "lead_time",
    "scale_down_delay",
    "queues",
)
NODE_SHAPE_FIELDS = ("gpus", "mig_layout", "time_slicing_replicas", "labels")
NODE_SHAPE_LABELS = ("rack", "network_domain")
POOL_QUEUE_FIELDS = ("may_scale_up", "warm_nodes")
MAX_POOL_NODES = 10_000


def _parse_node_pools(
    data: Mapping[str, Any],
    problems: list[Problem],
    gpu_classes: Mapping[str, Any],
    queue_names: set[str],
) -> dict[str, Any]:
    """``node_pools``: per GPU class, the nodes a provisioner adds and removes (docs/policy.md).
    Each error names the pool and the field (``node_pools[l4-pool].node.gpus``)."""
    result: dict[str, Any] = {}
    classes_taken: dict[str, str] = {}
    for name, entry in _named_entries(data, "node_pools", problems, NAME):
        entry.check_fields(NODE_POOL_FIELDS)
        gpu_class = entry.get("gpu_class", _text)
        spec = gpu_classes.get(gpu_class) if gpu_class else None
        if gpu_class and spec is None:
            entry.problem("gpu_class", f"unknown GPU class {gpu_class!r}")
        elif gpu_class in classes_taken:
            entry.problem(
                "gpu_class", f"{gpu_class} already has node pool {classes_taken[gpu_class]}"
            )
        elif gpu_class:
            classes_taken[gpu_class] = name
        bound = _bounded(MAX_POOL_NODES)
        min_nodes = entry.get("min_nodes", _int, default=0, check=_not_negative_or(bound))
        max_nodes = entry.get("max_nodes", _int, check=_positive_or(bound))
        if min_nodes is not None and max_nodes is not None and min_nodes > max_nodes:
            entry.problem("max_nodes", f"{max_nodes} is less than min_nodes {min_nodes}")
        shape = _node_shape(entry, spec)
        lead = _lead_time(entry)
        delay = entry.get("scale_down_delay", parse_duration, check=_not_negative_duration)
        terms = _pool_queue_terms(entry, queue_names)
        if max_nodes is not None and terms:
            floors = sum(t["warm_nodes"] for t in terms.values())
            if floors > max_nodes:
                entry.problem(
                    "queues",
                    f"warm floors add up to {floors} nodes, more than max_nodes {max_nodes}",
                )
        result[name] = {
            "description": entry.get("description", _text, default=""),
            "gpu_class": gpu_class,
            "min_nodes": min_nodes,
            "max_nodes": max_nodes,
            "node": shape,
            "lead_time": lead,
            "scale_down_delay": delay,
            "queues": terms,
        }
    return result


def _bounded(most: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value <= most else f"at most {most:,} (got {value:,})"

    return check


def _not_negative_or(bound: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    return lambda value: _not_negative(value) or bound(value)


def _positive_or(bound: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    return lambda value: _positive(value) or bound(value)


def _not_negative_duration(value: timedelta) -> str | None:
    return None if value >= timedelta(0) else "must not be negative"


def _sub_entry(entry: _Entry, field: str) -> _Entry | None:
    raw = entry.data.get(field)
    if raw is None:
        entry.problem(field, "required")
        return None
    if not isinstance(raw, dict):
        entry.problem(field, "must be a mapping of fields")
        return None
    return _Entry(f"{entry.where}.{field}", raw, entry.problems)


def _node_shape(entry: _Entry, spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    node = _sub_entry(entry, "node")
    if node is None:
        return None
    node.check_fields(NODE_SHAPE_FIELDS)
    gpus = node.get("gpus", _int, check=_positive_or(_bounded(64)))
    replicas = node.get("time_slicing_replicas", _int, default=1, check=_positive_or(_bounded(64)))
    layout: dict[str, int] = {}
    raw_layout = node.data.get("mig_layout")
    if raw_layout is not None:
        if not isinstance(raw_layout, dict):
            node.problem("mig_layout", "must map MIG profiles to slices per node, e.g. 1g.10gb: 7")
        else:
            known = (spec or {}).get("mig_profiles") or {}
            for profile, slices in sorted(raw_layout.items(), key=lambda item: str(item[0])):
                where = f"mig_layout.{profile}"
                if spec is not None and str(profile) not in known:
                    node.problem(where, f"{profile} is not one of the class's MIG profiles")
                    continue
                try:
                    count = _int(slices)
                except ValueError as exc:
                    node.problem(where, str(exc))
                    continue
                if count <= 0:
                    node.problem(where, f"must be greater than 0 (got {count})")
                    continue
                layout[str(profile)] = count
    if layout and replicas not in (None, 1):
        node.problem("time_slicing_replicas", "a MIG-partitioned node is not also time-sliced")
    labels: dict[str, str] = {}
    raw_labels = node.data.get("labels")
    if raw_labels is not None:
        if not isinstance(raw_labels, dict):
            node.problem("labels", "must map label names to values, e.g. rack: rack-5")
        else:
            for key, value in sorted(raw_labels.items(), key=lambda item: str(item[0])):
                if not isinstance(key, str) or not isinstance(value, str | int):
                    node.problem(f"labels.{key}", f"{_shown(value)} is not text")
                    continue
                labels[key] = str(value)
    return {
        "gpus": gpus,
        "mig_layout": layout,
        "time_slicing_replicas": replicas,
        "labels": labels,
    }


def _lead_time(entry: _Entry) -> dict[str, timedelta] | None:
    lead = _sub_entry(entry, "lead_time")
    if lead is None:
        return None
    lead.check_fields(["median", "p90"])
    median = lead.get("median", parse_duration, check=_positive_duration)
    p90 = lead.get("p90", parse_duration, check=_positive_duration)
    if median is not None and p90 is not None and p90 < median:
        lead.problem(
            "p90", f"{format_duration(p90)} is shorter than median {format_duration(median)}"
        )
    return {"median": median, "p90": p90}


def _pool_queue_terms(entry: _Entry, queue_names: set[str]) -> dict[str, Any]:
    raw = entry.data.get("queues")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        entry.problem("queues", "must map queue names to {may_scale_up, warm_nodes}")
        return {}
    terms: dict[str, Any] = {}
    for queue, fields in sorted(raw.items(), key=lambda item: str(item[0])):
        where = f"queues.{queue}"
        if queue not in queue_names:
            entry.problem(where, f"unknown queue {queue!r}")
            continue
        if not isinstance(fields, dict):
            entry.problem(where, "must be a mapping with may_scale_up and/or warm_nodes")
            continue
        term = _Entry(f"{entry.where}.{where}", fields, entry.problems)
        term.check_fields(POOL_QUEUE_FIELDS)
        terms[str(queue)] = {
            "may_scale_up": term.get("may_scale_up", _bool, default=False),
            "warm_nodes": term.get(
                "warm_nodes", _int, default=0, check=_not_negative_or(_bounded(MAX_POOL_NODES))
            ),
        }
    return terms


# --- Writing the file ----------------------------------------------------------------------------


# --- What a policy promises ----------------------------------------------------------------------


def peak_reserved(
    windows: Iterable[tuple[Decimal, datetime | None, datetime | None]], *, now: datetime
) -> tuple[Decimal, datetime | None]:
    """The most GPU-equivalents reserved at one instant from ``now`` on, and when (None: standing).

    ``windows`` are ``(amount, starts_at, ends_at)``; a standing reservation has no start or end
    and counts at every instant. Windows that ended by ``now`` promise nothing any more.
    """
    standing = sum((a for a, s, _ in windows if s is None), Decimal(0))
    events: list[tuple[datetime, int, Decimal]] = []
    for amount, starts_at, ends_at in windows:
        if starts_at is None or ends_at is None or ends_at <= now:
            continue
        # Ends sort before starts at the same instant: a window ending at 10:00 and one starting
        # at 10:00 never overlap.
        events.append((max(starts_at, now), 1, amount))
        events.append((ends_at, 0, -amount))
    peak, peak_at, level = Decimal(0), None, Decimal(0)
    for at, _, delta in sorted(events):
        level += delta
        if level > peak:
            peak, peak_at = level, at
    return standing + peak, peak_at


def policy_overlay(current: Policy, file_policy: Policy, *, prune: bool) -> Policy:
    """The policy the database will hold once ``file_policy`` is applied over ``current``."""
    result: Policy = {section: dict(current.get(section, {})) for section in SECTIONS}
    for section, objects in file_policy.items():
        if section in ("fair_share", "budgets") or (prune and section in NAMED_SECTIONS):
            result[section] = dict(objects)
        else:
            result[section].update(objects)
    return result
