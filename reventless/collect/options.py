"""``CollectorOptions``: how a collector runs (paging, polling, static or leased groups)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import SpecError


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    """``page_size``: events per catch-up transaction; ``poll_interval``: seconds between
    store polls (the safety net when the broker is down); ``grace``: how long a wake-up
    waits for live delivery before reading the store; ``overlap_commits``: whether a
    catch-up of side effects or mappers handles its next page while a page's commit is
    in flight (None: as the store says, ``CollectorStore.overlap_commits``: PostgreSQL
    yes, SQLite no; True may pay on SQLite where handlers wait on I/O rather than CPU).

    Several processes can run one collector as a group that shares each topic by
    partition, so each aggregate is handled by one member, in order:

    - ``group="static"`` (default) with ``members``/``member``: this process is member
      ``member`` of ``members`` and owns the partitions ``p`` with ``p % members ==
      member``; the partitions of a member that is down wait for it.
    - ``group="leased"``: members come and go. Each holds leases on its fair share of the
      partitions, renewed every ``heartbeat`` seconds (default ``lease_ttl / 3``); the
      partitions of a member that stopped heartbeating are taken over ``lease_ttl``
      seconds later, and a joining member gets its share (see ``reventless.collect.groups``).
      ``worker`` names this member (default ``hostname-pid-random``; unique per process).

    Example::

        rv.CollectorOptions(group="leased", lease_ttl=10.0)
    """

    page_size: int = 2000
    poll_interval: float = 0.5
    grace: float = 0.05
    members: int = 1
    member: int = 0
    group: Literal["static", "leased"] = "static"
    lease_ttl: float = 10.0
    heartbeat: float | None = None
    worker: str | None = None
    overlap_commits: bool | None = None

    def __post_init__(self) -> None:
        if self.group not in ("static", "leased"):
            raise SpecError(f"group must be 'static' or 'leased', got {self.group!r}")
        if not 0 <= self.member < self.members:
            raise SpecError(f"member must be 0..{self.members - 1}, got {self.member}")
        if self.group == "leased":
            if self.members != 1 or self.member != 0:
                raise SpecError("members/member are for static groups, not group='leased'")
            if not 0.05 <= self.lease_ttl <= 3600:
                raise SpecError(f"lease_ttl must be 0.05..3600 seconds, got {self.lease_ttl!r}")
            if not 0 < self.heartbeat_interval < self.lease_ttl:
                raise SpecError(
                    f"heartbeat must be > 0 and below lease_ttl ({self.lease_ttl}), "
                    f"got {self.heartbeat!r}"
                )
            if self.worker is not None and not 0 < len(self.worker) <= 200:
                raise SpecError("a worker id has 1..200 characters")

    def static_group(self, component: str, member: int | None = None) -> str:
        """The broker consumer group of ``component``'s static member ``member`` (default
        this process's): the component's name, or ``<name>.m<member>of<members>``."""
        m = self.member if member is None else member
        return f"{component}.m{m}of{self.members}" if self.members > 1 else component

    def static_share(self, partitions: int, member: int | None = None) -> list[int]:
        """The partitions of a topic (of ``partitions``) that static member ``member``
        (default this process's) owns: ``p % members == member``."""
        m = self.member if member is None else member
        return [p for p in range(partitions) if p % self.members == m]

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between lease heartbeats (``heartbeat``, default ``lease_ttl / 3``)."""
        return self.lease_ttl / 3 if self.heartbeat is None else self.heartbeat
