"""What a team may ever hold of one GPU class for a job of one queue: the one rule of entitlement.

A team's *quota* on a class is its nominal amount, plus its borrowing limit when the queue's
jobs may borrow (``borrowing_allowed``: only work that may be preempted borrows). A
reservation-only queue runs on the team's reservations alone; any other queue may also use the
team's largest reservation (open now or later). The engine (``NeverFits``, ``QuotaExceeded``)
and submission (``queues/jobs/requests.py``) read these functions; neither computes its own.

Amounts are GPU-equivalents as ``Fraction`` (the engine converts its scaled units back and
forth exactly: they are multiples of one unit).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

Amount = TypeVar("Amount", int, Fraction)


def quota_most(*, nominal: Amount, borrowing_limit: Amount, may_borrow: bool) -> Amount:
    """The most a team's quota on a class lets one queue's jobs hold: nominal, plus the
    borrowing limit when the queue's jobs may borrow (in whatever unit both are given)."""
    return nominal + borrowing_limit if may_borrow else nominal


def gpu_text(value: Fraction) -> str:
    """A GPU-equivalent amount for people: whole, or to two decimals."""
    if value.denominator == 1:
        return str(int(value))
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True, slots=True)
class Entitlement:
    """A team's entitlement on one GPU class for a job of one queue.

    ``reserved`` is the largest reservation the team may use for the queue's jobs on the class
    that is open now or opens later (0: none); ``may_borrow`` whether the queue's jobs may
    borrow (``borrowing_allowed``)."""

    team: str
    queue: str
    nominal: Fraction
    borrowing_limit: Fraction
    reserved: Fraction
    may_borrow: bool
    reservation_only: bool

    @property
    def quota(self) -> Fraction:
        return quota_most(
            nominal=self.nominal, borrowing_limit=self.borrowing_limit, may_borrow=self.may_borrow
        )

    @property
    def most(self) -> Fraction:
        """The most GPU-equivalents of the class the team could ever hold for such a job."""
        if self.reservation_only:
            return self.reserved
        return max(self.reserved, self.quota)

    def shortfall(self, demand: Fraction) -> str | None:
        """Why a job needing ``demand`` can never hold the class, with the numbers; None when
        the entitlement is large enough."""
        if demand <= self.most:
            return None
        needs = f"needs {gpu_text(demand)}"
        if self.reservation_only:
            return f"{needs}; team {self.team}'s reservations hold at most {gpu_text(self.most)}"
        if self.may_borrow:
            terms = f"nominal {gpu_text(self.nominal)} + borrowing {gpu_text(self.borrowing_limit)}"
        else:
            terms = f"nominal {gpu_text(self.nominal)}; queue {self.queue} may not borrow"
        if self.reserved:
            terms += f"; its largest reservation holds {gpu_text(self.reserved)}"
        return f"{needs}; team {self.team} may hold at most {gpu_text(self.most)} ({terms})"


def quota_hint(team: str, most: dict[str, Fraction]) -> str:
    """What to do about a job that needs more than its team may hold on every class it may use
    (``most``: per class, the team's entitlement)."""
    best_class = max(most, key=lambda c: (most[c], c))
    if not most[best_class]:
        return (
            f"team {team} holds no quota or reservation it may use here: "
            "ask an admin for quota, or use another queue"
        )
    return (
        f"ask for at most {gpu_text(most[best_class])} GPU-equivalents "
        f"({best_class}), or ask an admin for more quota"
    )
