"""Periodic job scheduling for kestrel-scheduler.

This module holds the core of the ``kestrel-scheduler`` process: it turns
cron-style expressions into concrete run times, decides which schedules are
due on every tick, applies the misfire policy when the scheduler falls behind,
and computes retry delays for periodic runs that fail to enqueue.

The scheduler never executes job code itself. When a schedule is due it
enqueues an ordinary job on the broker, exactly as a client calling
``kestrel.enqueue()`` would, and a ``kestrel-worker`` picks it up from there.

Only one scheduler may run per installation. The process entry point takes
the scheduler lock in the database before constructing :class:`Scheduler`;
nothing in this module assumes it could be racing another scheduler.

Relevant ``kestrel.toml`` keys (all can be overridden with ``KESTREL_``
environment variables, e.g. ``KESTREL_SCHEDULER__MISFIRE_GRACE=120``):

    scheduler.timezone       zone used to interpret cron fields (default "UTC")
    scheduler.misfire_grace  seconds a run may be late and still fire (default 60)
    scheduler.coalesce       collapse several due runs into one (default true)
    retry.backoff            "exponential" (default), "fixed" or "linear"
    retry.base_delay         first retry delay in seconds (default 2)
    retry.max_delay          upper bound for any retry delay (default 600)
    retry.jitter             random spread applied to each delay (default 0.1)
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator
from zoneinfo import ZoneInfo

from kestrel.broker.client import BrokerClient, EnqueueError
from kestrel.config import Settings

log = logging.getLogger("kestrel.scheduler")

# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

DEFAULT_TIMEZONE = "UTC"
DEFAULT_MISFIRE_GRACE = 60          # seconds, mirrors scheduler.misfire_grace
DEFAULT_BASE_DELAY = 2.0            # seconds, mirrors retry.base_delay
DEFAULT_MAX_DELAY = 600.0           # seconds, mirrors retry.max_delay
BACKOFF_MODES = ("exponential", "fixed", "linear")

# Jitter spreads retries of many schedules that failed at the same moment so
# they do not hit the broker in lock-step. 0.1 means +/- 10 % of the delay.
# Overridden by retry.jitter.
JITTER_RATIO = 0.1
MIN_JITTERED_DELAY = 0.5            # never retry faster than half a second

# How far ahead next_run() searches before giving up on an expression that
# can never match (for example "0 0 31 2 *", the 31st of February).
MAX_LOOKAHEAD = timedelta(days=366 * 4)

# Upper bound on runs enqueued in one tick for a schedule that has
# catch_up=True while scheduler.coalesce is off, so a scheduler restored after
# a long outage does not flood the broker with hundreds of back-dated runs.
MAX_CATCHUP_RUNS = 25

# Shorthand expressions accepted in place of five cron fields.
CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# (name, lowest value, highest value) for the five fields, in order.
_FIELD_BOUNDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day_of_month", 1, 31),
    ("month", 1, 12),
    ("day_of_week", 0, 6),          # 0 = Sunday; 7 is accepted as Sunday too
)


class CronSyntaxError(ValueError):
    """Raised when a cron expression cannot be parsed."""


# ---------------------------------------------------------------------------
# Cron parsing
# ---------------------------------------------------------------------------

def _parse_field(raw: str, name: str, low: int, high: int) -> frozenset[int]:
    """Expand one cron field into the set of integers it matches.

    Supports ``*``, single values, ranges (``1-5``), steps (``*/15``,
    ``10-50/20``) and comma-separated lists of any of these.
    """
    values: set[int] = set()
    for part in raw.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronSyntaxError(f"bad step {step_text!r} in {name} field")
            step = int(step_text)
        if part == "*":
            start, end = low, high
        elif "-" in part:
            start_text, end_text = part.split("-", 1)
            start, end = int(start_text), int(end_text)
        else:
            start = end = int(part)
        if name == "day_of_week" and end == 7:
            # Accept 7 as Sunday, as most cron implementations do.
            values.add(0)
            end = 6
        if start < low or end > high or start > end:
            raise CronSyntaxError(
                f"{name} value {part!r} outside {low}-{high}"
            )
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class CronExpression:
    """A parsed five-field cron expression.

    Field order is minute, hour, day of month, month, day of week. When both
    day fields are restricted, a time matches if EITHER of them matches,
    which is the traditional cron rule and a frequent source of surprise.
    """

    source: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool

    @classmethod
    def parse(cls, expression: str) -> "CronExpression":
        """Parse ``expression`` (or an alias such as ``@hourly``)."""
        text = CRON_ALIASES.get(expression.strip().lower(), expression.strip())
        fields = text.split()
        if len(fields) != 5:
            raise CronSyntaxError(
                f"expected 5 fields, got {len(fields)} in {expression!r}"
            )
        parsed = [
            _parse_field(raw, name, low, high)
            for raw, (name, low, high) in zip(fields, _FIELD_BOUNDS)
        ]
        return cls(
            source=expression,
            minutes=parsed[0],
            hours=parsed[1],
            days_of_month=parsed[2],
            months=parsed[3],
            days_of_week=parsed[4],
            dom_restricted=fields[2] != "*",
            dow_restricted=fields[4] != "*",
        )

    def matches(self, moment: datetime) -> bool:
        """Return True if the wall-clock ``moment`` satisfies every field."""
        if moment.minute not in self.minutes or moment.hour not in self.hours:
            return False
        if moment.month not in self.months:
            return False
        cron_weekday = (moment.weekday() + 1) % 7   # Python: Monday=0
        dom_ok = moment.day in self.days_of_month
        dow_ok = cron_weekday in self.days_of_week
        if self.dom_restricted and self.dow_restricted:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def next_run(self, after: datetime, tz: ZoneInfo) -> datetime:
        """Return the first matching instant strictly after ``after``.

        ``after`` must be timezone-aware. Matching happens on wall-clock time
        in ``tz``; the result is returned in UTC. A run whose wall-clock time
        does not exist because of a DST jump forward fires once, at the first
        valid minute after the gap (02:30 becomes 03:00 in Europe/Amsterdam
        on the last Sunday of March). A minute that occurs twice when clocks
        go back fires only once, on the first occurrence (fold=0).
        """
        local = after.astimezone(tz).replace(second=0, microsecond=0)
        candidate = local.replace(tzinfo=None) + timedelta(minutes=1)
        limit = candidate + MAX_LOOKAHEAD
        while candidate < limit:
            if self.matches(candidate):
                shifted = candidate
                while not _wall_time_exists(shifted, tz):
                    shifted += timedelta(minutes=1)
                result = shifted.replace(tzinfo=tz, fold=0).astimezone(timezone.utc)
                # Inside a repeated hour the first occurrence may already be
                # behind us; never return an instant at or before ``after``.
                if result > after:
                    return result
            candidate += timedelta(minutes=1)
        raise CronSyntaxError(f"{self.source!r} never matches")


def _wall_time_exists(naive: datetime, tz: ZoneInfo) -> bool:
    """Return False for local times skipped by a DST jump forward."""
    aware = naive.replace(tzinfo=tz, fold=0)
    roundtrip = aware.astimezone(timezone.utc).astimezone(tz)
    return roundtrip.replace(tzinfo=None) == naive


# ---------------------------------------------------------------------------
# Retry backoff
# ---------------------------------------------------------------------------

def compute_backoff(
    attempt: int,
    base_delay: float = DEFAULT_BASE_DELAY,
    max_delay: float = DEFAULT_MAX_DELAY,
    mode: str = "exponential",
) -> float:
    """Return the delay in seconds before retry number ``attempt``.

    ``attempt`` counts from 1 (the first retry after the initial failure).
    The result is never larger than ``max_delay``:

    * ``"exponential"``: base_delay * 2 ** (attempt - 1), so with the
      defaults 2, 4, 8, 16, 32, ... and capped at 600 from attempt 10 on.
    * ``"fixed"``: always base_delay.
    * ``"linear"``: base_delay * attempt, so 2, 4, 6, 8, ...

    Raises ValueError for attempt < 1, a negative delay or an unknown mode.
    Jitter is not applied here; see :func:`apply_jitter`.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if base_delay < 0 or max_delay < 0:
        raise ValueError("delays must not be negative")
    if mode == "exponential":
        # Cap the exponent first: 2 ** 2000 is a perfectly valid int, but
        # converting it to float overflows.
        delay = base_delay * (2 ** min(attempt - 1, 62))
    elif mode == "fixed":
        delay = base_delay
    elif mode == "linear":
        delay = base_delay * attempt
    else:
        raise ValueError(
            f"unknown backoff mode {mode!r}; expected one of {BACKOFF_MODES}"
        )
    return float(min(delay, max_delay))


def apply_jitter(
    delay: float,
    ratio: float = JITTER_RATIO,
    rng: Callable[[float, float], float] = random.uniform,
) -> float:
    """Spread ``delay`` randomly by +/- ``ratio`` (10 % by default).

    The result is never below MIN_JITTERED_DELAY, so a zero base delay still
    leaves a short pause between attempts. Pass a deterministic ``rng`` in
    tests.
    """
    spread = delay * ratio
    return max(MIN_JITTERED_DELAY, delay + rng(-spread, spread))


# ---------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------

@dataclass
class Schedule:
    """One periodic job registered with the scheduler.

    ``name`` must be unique per scheduler. ``task`` is the dotted path of the
    job function, ``queue`` the broker queue the runs are enqueued on.
    ``timezone`` overrides ``scheduler.timezone`` for this schedule only.
    With ``catch_up=False`` (the default) a run that is later than the
    misfire grace is skipped; with ``catch_up=True`` it is still enqueued
    (as one coalesced run, or up to MAX_CATCHUP_RUNS runs when
    ``scheduler.coalesce`` is false).
    """

    name: str
    cron: str
    task: str
    queue: str = "default"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    priority: int = 5               # 0 (lowest) to 9 (highest), since 2.1
    timezone: str | None = None
    catch_up: bool = False
    enabled: bool = True
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    enqueue_attempt: int = 0        # consecutive failed enqueue attempts
    retry_not_before: datetime | None = None
    misfire_count: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.priority <= 9:
            raise ValueError(f"priority must be 0-9, got {self.priority}")
        self.expression = CronExpression.parse(self.cron)


# ---------------------------------------------------------------------------
# Scheduler
# ---------------------------------------------------------------------------

class Scheduler:
    """Keeps the registered schedules and enqueues their runs when due.

    ``tick()`` is called by the main loop roughly once a second. Each tick
    asks :meth:`due_jobs` which schedules are due, applies the misfire
    policy, enqueues the runs and advances every schedule to its next run.
    """

    def __init__(
        self,
        broker: BrokerClient,
        settings: Settings,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.broker = broker
        self.tz = ZoneInfo(settings.get("scheduler.timezone", DEFAULT_TIMEZONE))
        self.misfire_grace = timedelta(
            seconds=settings.get("scheduler.misfire_grace", DEFAULT_MISFIRE_GRACE)
        )
        self.backoff_mode = settings.get("retry.backoff", "exponential")
        self.base_delay = float(settings.get("retry.base_delay", DEFAULT_BASE_DELAY))
        self.max_delay = float(settings.get("retry.max_delay", DEFAULT_MAX_DELAY))
        self.jitter = float(settings.get("retry.jitter", JITTER_RATIO))
        self.coalesce = bool(settings.get("scheduler.coalesce", True))
        # The clock is injectable so tests can drive time by hand.
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._schedules: dict[str, Schedule] = {}

    # -- registration -------------------------------------------------------

    def add(self, schedule: Schedule) -> Schedule:
        """Register ``schedule`` and compute its first run time.

        Raises KeyError if a schedule with the same name already exists; use
        :meth:`replace` to change an existing schedule in place.
        """
        if schedule.name in self._schedules:
            raise KeyError(f"schedule {schedule.name!r} already registered")
        schedule.next_run_at = schedule.expression.next_run(
            self._clock(), self._zone_for(schedule)
        )
        self._schedules[schedule.name] = schedule
        log.info(
            "added schedule %s (%s), next run %s",
            schedule.name, schedule.cron, schedule.next_run_at.isoformat(),
        )
        return schedule

    def replace(self, schedule: Schedule) -> Schedule:
        """Replace an existing schedule, keeping no state from the old one."""
        self._schedules.pop(schedule.name, None)
        return self.add(schedule)

    def remove(self, name: str) -> bool:
        """Unregister ``name``; return False if it was not registered."""
        return self._schedules.pop(name, None) is not None

    def _zone_for(self, schedule: Schedule) -> ZoneInfo:
        return ZoneInfo(schedule.timezone) if schedule.timezone else self.tz

    # -- evaluation ---------------------------------------------------------

    def due_jobs(self, now: datetime | None = None) -> list[Schedule]:
        """Return enabled schedules whose next run is at or before ``now``.

        The list is sorted by priority (highest first) and then by next run
        time (oldest first), so that when the broker is slow the most
        important and most overdue runs go out first. Schedules waiting out
        an enqueue backoff are left out until ``retry_not_before`` passes.
        """
        now = now or self._clock()
        due = [
            s for s in self._schedules.values()
            if s.enabled
            and s.next_run_at is not None
            and s.next_run_at <= now
            and (s.retry_not_before is None or s.retry_not_before <= now)
        ]
        due.sort(key=lambda s: (-s.priority, s.next_run_at))
        return due

    def _missed_runs(self, schedule: Schedule, now: datetime) -> Iterator[datetime]:
        """Yield every scheduled instant from next_run_at up to ``now``."""
        run_at = schedule.next_run_at
        zone = self._zone_for(schedule)
        while run_at is not None and run_at <= now:
            yield run_at
            run_at = schedule.expression.next_run(run_at, zone)

    def tick(self, now: datetime | None = None) -> int:
        """Enqueue all due runs and return how many were enqueued.

        A run is "misfired" when it is more than ``misfire_grace`` late at
        the moment the tick sees it (scheduler paused, broker unreachable,
        host suspended...). Misfired runs are skipped and counted unless the
        schedule has ``catch_up=True``. A run whose enqueue failed is retried
        after the backoff, but only while it is still within the grace; time
        spent waiting for the broker counts against the grace too. Whatever
        happens, the schedule is advanced so that its next_run_at lies in the
        future.
        """
        now = now or self._clock()
        enqueued = 0
        for schedule in self.due_jobs(now):
            missed = list(self._missed_runs(schedule, now))
            to_fire = self._apply_misfire_policy(schedule, missed, now)
            for run_at in to_fire:
                if not self._enqueue(schedule, run_at, now):
                    break                       # retry this run next time
                enqueued += 1
            else:
                schedule.next_run_at = schedule.expression.next_run(
                    now, self._zone_for(schedule)
                )
        return enqueued

    def _apply_misfire_policy(
        self, schedule: Schedule, missed: list[datetime], now: datetime
    ) -> list[datetime]:
        """Decide which of the ``missed`` instants should still be enqueued.

        Runs later than the grace are dropped unless the schedule has
        ``catch_up=True``. With ``scheduler.coalesce`` on (the default), what
        is left collapses into a single run for the most recent instant.
        """
        on_time = [t for t in missed if now - t <= self.misfire_grace]
        late = [t for t in missed if now - t > self.misfire_grace]
        if late and not schedule.catch_up:
            schedule.misfire_count += len(late)
            lateness = (now - late[0]).total_seconds()
            log.warning(
                "misfired: skipped %d run(s) of %s, oldest late by %.0fs "
                "(misfire_grace=%.0fs)",
                len(late), schedule.name, lateness,
                self.misfire_grace.total_seconds(),
            )
            missed = on_time
        if self.coalesce and len(missed) > 1:
            log.info(
                "coalesced %d due runs of %s into one", len(missed), schedule.name
            )
            return missed[-1:]
        if len(missed) > MAX_CATCHUP_RUNS:
            dropped = len(missed) - MAX_CATCHUP_RUNS
            log.warning(
                "catch-up for %s limited to %d runs, dropping %d oldest",
                schedule.name, MAX_CATCHUP_RUNS, dropped,
            )
            return missed[-MAX_CATCHUP_RUNS:]
        return missed

    def _enqueue(self, schedule: Schedule, run_at: datetime, now: datetime) -> bool:
        """Enqueue one run; on failure hold the schedule back by the backoff."""
        try:
            self.broker.enqueue(
                schedule.task,
                args=schedule.args,
                kwargs=schedule.kwargs,
                queue=schedule.queue,
                priority=schedule.priority,
                # Deduplication key: a restarted scheduler that re-enqueues
                # the same instant is ignored by the broker.
                dedupe_key=f"sched:{schedule.name}:{run_at.isoformat()}",
            )
        except EnqueueError as exc:
            schedule.enqueue_attempt += 1
            delay = apply_jitter(
                compute_backoff(
                    schedule.enqueue_attempt,
                    self.base_delay,
                    self.max_delay,
                    self.backoff_mode,
                ),
                ratio=self.jitter,
            )
            schedule.retry_not_before = now + timedelta(seconds=delay)
            log.error(
                "enqueue of %s failed (attempt %d): %s; retrying in %.1fs",
                schedule.name, schedule.enqueue_attempt, exc, delay,
            )
            return False
        schedule.enqueue_attempt = 0
        schedule.retry_not_before = None
        schedule.last_run_at = run_at
        return True

    # -- introspection ------------------------------------------------------

    def upcoming(self, limit: int = 10) -> list[tuple[str, datetime]]:
        """Return (name, next_run_at) pairs for ``kestrelctl schedules list``."""
        pairs = [
            (s.name, s.next_run_at)
            for s in self._schedules.values()
            if s.enabled and s.next_run_at is not None
        ]
        return sorted(pairs, key=lambda p: p[1])[:limit]

    def __iter__(self) -> Iterator[Schedule]:
        return iter(self._schedules.values())

    def __len__(self) -> int:
        return len(self._schedules)
