"""The one back-off: polls first, grows its sleeps to the cap, stops at the deadline."""

from __future__ import annotations

import time

from air_skills.polling import backoff


def test_first_poll_is_immediate_and_the_deadline_ends_it() -> None:
    t0 = time.monotonic()
    waited = list(backoff(first_s=0.01, cap_s=0.02, timeout_s=0.1))
    assert waited[0] < 0.01  # the first poll comes before any sleep
    assert waited[-1] >= 0.1 - 1e-3  # one last poll at the deadline
    assert waited == sorted(waited)
    assert time.monotonic() - t0 >= 0.1


def test_sleeps_grow_to_the_cap() -> None:
    polls = backoff(first_s=0.001, factor=2.0, cap_s=0.004, timeout_s=None)
    stamps = [next(polls) for _ in range(7)]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert gaps[0] >= 0.001
    assert all(g >= 0.004 for g in gaps[3:])  # 1, 2, 4 ms, then capped at 4 ms


def test_no_timeout_zero_means_one_poll() -> None:
    assert len(list(backoff(timeout_s=0))) == 1
