"""``engine.Slots``, the delivery engine's concurrency core: who may start an attempt now.

The rules (relay/delivery/engine.py): at most ``total`` attempts in flight; at most
``per_destination`` to one destination; a destination whose last attempt got no HTTP answer
is *suspect* and holds at most one slot, all suspects together at most half of them; an
answer clears the suspicion.
"""

from __future__ import annotations

import threading

from relay.delivery.engine import MAX_SUSPECTS, Slots


def test_the_total_bounds_every_attempt() -> None:
    slots = Slots(total=3, per_destination=3)
    assert [slots.take(d) for d in ("a", "b", "c", "d")] == [True, True, True, False]
    assert slots.free == 0
    slots.release("b", answered=True)
    assert slots.free == 1
    assert slots.take("d")


def test_one_destination_holds_at_most_its_share() -> None:
    slots = Slots(total=10, per_destination=2)
    assert [slots.take("a") for _ in range(3)] == [True, True, False]
    assert slots.take("b")  # the others still get theirs
    slots.release("a", answered=True)
    assert slots.take("a")


def test_the_share_is_never_more_than_the_total() -> None:
    slots = Slots(total=2, per_destination=50)
    assert slots.per_destination == 2
    assert Slots(total=4, per_destination=0).per_destination == 1


def test_a_silent_destination_gets_one_slot_until_it_answers() -> None:
    slots = Slots(total=10, per_destination=5)
    assert slots.take("slow")
    slots.release("slow", answered=False)  # no HTTP answer: suspect
    assert slots.suspect("slow")
    assert slots.take("slow")
    assert not slots.take("slow")  # one at a time while suspect
    slots.release("slow", answered=True)  # it answered: its share again
    assert not slots.suspect("slow")
    assert [slots.take("slow") for _ in range(5)] == [True] * 5


def test_an_unknown_outcome_leaves_the_suspicion_as_it_was() -> None:
    slots = Slots(total=4, per_destination=4)
    slots.take("x")
    slots.release("x", answered=False)
    slots.take("x")
    slots.release("x", answered=None)  # e.g. the record failed: no news
    assert slots.suspect("x")
    slots.take("y")
    slots.release("y", answered=None)
    assert not slots.suspect("y")


def test_suspects_together_hold_at_most_half_the_slots() -> None:
    slots = Slots(total=4, per_destination=4)
    for dest in ("s1", "s2", "s3"):
        slots.take(dest)
        slots.release(dest, answered=False)
    assert slots.take("s1") and slots.take("s2")
    assert not slots.take("s3")  # two suspects busy = half of 4
    assert slots.take("healthy") and slots.take("healthy")  # the rest stays theirs
    assert slots.free == 0


def test_the_suspects_remembered_are_bounded_oldest_forgotten_first() -> None:
    slots = Slots(total=2, per_destination=1)
    for n in range(MAX_SUSPECTS + 1):
        slots.take(f"d{n}")
        slots.release(f"d{n}", answered=False)
    assert not slots.suspect("d0")
    assert slots.suspect("d1") and slots.suspect(f"d{MAX_SUSPECTS}")


def test_taking_and_giving_back_from_many_threads_keeps_the_count() -> None:
    slots = Slots(total=8, per_destination=3)
    peak: list[int] = []
    lock = threading.Lock()

    def work(dest: str) -> None:
        for _ in range(2_000):
            if slots.take(dest):
                with lock:
                    peak.append(slots.total - slots.free)
                slots.release(dest, answered=True)

    threads = [threading.Thread(target=work, args=(f"d{n % 4}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert slots.free == 8
    assert peak and max(peak) <= 8
