"""The course-subscription decisions of ``bench.dcb`` through the ``eventsourcing``
library's DCB support (``eventsourcing.dcb``, 9.5): its PostgreSQL recorder
(``eventsourcing.dcb.postgres_tt``; the library has no SQLite DCB recorder, only this and
an in-memory one).

The same decisions as reventless's: a ``Slice`` whose consistency boundary is the course's
``CourseDefined`` and ``StudentSubscribed`` events and the student's ``StudentSubscribed``
events (the union query of reventless's three decision models), folded by ``@event``
methods; ``DCBApplication.do`` reads the boundary, runs ``execute`` and appends under the
condition that nothing in the boundary landed after the position it read. ``do`` does not
retry a failed condition (``IntegrityError``): ``decide`` does, with reventless's backoff,
on a fresh slice. Events are stored as JSON (a small ``DCBMapper``: the library's own
``msgspec`` mapper needs a package the bench does not install).

Example::

    result = es_decisions([url_one_at_a_time, url_eight_threads], 1536)
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from eventsourcing.dcb.api import DCBEvent, DCBQuery, DCBQueryItem
from eventsourcing.dcb.application import DCBApplication
from eventsourcing.dcb.domain import Decision, Selector, Slice, Tagged
from eventsourcing.dcb.persistence import DCBMapper
from eventsourcing.domain import event
from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import get_topic, resolve_topic

from bench.dcb import MAX_COURSES, PATIENT, course_plan, lanes, peak_rss_mb


@dataclass
class CourseDefined(Decision):
    course_id: str
    capacity: int


@dataclass
class StudentSubscribed(Decision):
    student_id: str
    course_id: str


class JsonMapper(DCBMapper[Decision]):
    """Decisions as JSON objects, typed by their class's topic."""

    def to_dcb_event(self, event: Tagged[Decision]) -> DCBEvent:
        data = json.dumps(event.decision.as_dict(), separators=(",", ":")).encode()
        return DCBEvent(type=get_topic(type(event.decision)), data=data, tags=event.tags)

    def to_domain_event(self, event: DCBEvent) -> Tagged[Decision]:
        return Tagged(tags=event.tags, decision=resolve_topic(event.type)(**json.loads(event.data)))


class Subscribe(Slice[Decision]):
    """A student subscribes to a course that exists, has room, and they are under the limit."""

    def __init__(self, student_id: str, course_id: str) -> None:
        self.student_id, self.course_id = student_id, course_id
        self.places = self.taken = self.mine = 0

    def consistency_boundary(self) -> list[Selector]:
        return [
            Selector(types=[CourseDefined, StudentSubscribed], tags=[f"course:{self.course_id}"]),
            Selector(types=[StudentSubscribed], tags=[f"student:{self.student_id}"]),
        ]

    @event(CourseDefined)
    def _defined(self, capacity: int) -> None:
        self.places = capacity

    @event(StudentSubscribed)
    def _subscribed(self, student_id: str, course_id: str) -> None:
        self.taken += course_id == self.course_id
        self.mine += student_id == self.student_id

    def execute(self) -> None:
        if self.taken >= self.places:
            raise ValueError(f"course_full: {self.course_id}")
        if self.mine >= MAX_COURSES:
            raise ValueError(f"too_many_courses: {self.student_id}")
        tags = [f"student:{self.student_id}", f"course:{self.course_id}"]
        self.trigger_event(
            StudentSubscribed, tags, student_id=self.student_id, course_id=self.course_id
        )


def app_for(url: str, pool: int) -> DCBApplication:
    """A ``DCBApplication`` on the PostgreSQL database of a reventless store URL."""
    m = re.fullmatch(r"postgresql\+psycopg://([^@]+)@([^:/]+):(\d+)/(\w+)", url)
    if m is None:
        raise SystemExit(f"eventsourcing's DCB recorder is PostgreSQL only, not {url}")
    user, host, port, dbname = m.groups()
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.dcb.postgres_tt",
        "MAPPER_TOPIC": get_topic(JsonMapper),
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": host,
        "POSTGRES_PORT": port,
        "POSTGRES_USER": user,
        "POSTGRES_PASSWORD": "",
        "POSTGRES_POOL_SIZE": str(pool),
    }
    return DCBApplication(env=env)


def decide(app: DCBApplication, student_id: str, course_id: str) -> int:
    """Decide one subscription, retrying a failed condition; the attempts it took."""
    for attempt in range(1, PATIENT + 1):
        try:
            app.do(Subscribe(student_id, course_id))
            return attempt
        except IntegrityError:
            time.sleep(min(0.2, 0.002 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5))
    raise RuntimeError(f"{student_id} -> {course_id}: no attempt landed")


def run(url: str, plan: Sequence[tuple[str, str]], course_ids: list[str], width: int) -> Any:
    """Decisions/s, this process's CPU ms per decision and the attempts of ``plan`` in
    ``width`` threads (lanes as reventless's)."""
    app = app_for(url, pool=max(2, width))
    with app:
        defined = [
            Tagged[Decision](tags=[f"course:{c}"], decision=CourseDefined(c, 1000))
            for c in course_ids
        ]
        app.repository.eventstore.append(defined)
        attempts: list[int] = []

        def lane(items: list[tuple[str, str]]) -> None:
            for student, course in items:
                attempts.append(decide(app, student, course))

        t, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(width) as pool:
            list(pool.map(lane, lanes(plan, width)))
        rate = len(plan) / (time.perf_counter() - t)
        cpu_ms = (time.process_time() - cpu) * 1000 / len(plan)
        kind = DCBQueryItem(types=[get_topic(StudentSubscribed)])
        landed = len(list(app.recorder.read(DCBQuery(items=[kind]))))
        assert landed == len(plan), landed
    return rate, cpu_ms, attempts


def es_decisions(urls: list[str], n: int) -> dict[str, float]:
    """One at a time on ``urls[0]``, 8 threads on disjoint tags on ``urls[1]``."""
    plan, course_ids = course_plan(n)
    out: dict[str, float] = {}
    for url, width, key in ((urls[0], 1, "es_seq"), (urls[1], 8, "es_8")):
        print(f"  {key} ...", flush=True)
        rate, cpu_ms, attempts = run(url, plan, course_ids, width)
        out[key] = rate
        out[f"{key}_cpu"] = cpu_ms
        out[f"{key}_att"] = sum(attempts) / len(attempts)
    return out | {"rss": peak_rss_mb()}
