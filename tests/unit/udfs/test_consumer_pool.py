"""udfs.consumer_pool: Kafka consumers kept between the range reads of one Python worker. Plain
objects stand in for consumers here (the pool only calls close()); the reads themselves are
tested against the real broker in tests/integration/test_partition_reader_pool.py."""

from __future__ import annotations

from udfs.consumer_pool import ConsumerPool


class Consumer:
    def __init__(self, name: str):
        self.name, self.closed = name, False

    def close(self):
        self.closed = True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_consumer_given_back_is_taken_again_with_the_same_settings_only():
    pool = ConsumerPool(clock=Clock())
    a = Consumer("a")
    pool.give_back(("bootstrap", "x"), a, "errors-a")
    assert pool.take(("bootstrap", "y")) is None
    assert pool.take(("bootstrap", "x")) == (a, "errors-a")
    assert pool.take(("bootstrap", "x")) is None  # taken: one reader at a time
    assert not a.closed


def test_consumers_idle_too_long_are_closed_not_handed_out():
    clock = Clock()
    pool = ConsumerPool(idle_s=30, clock=clock)
    old, fresh = Consumer("old"), Consumer("fresh")
    pool.give_back("k", old, None)
    clock.now = 20
    pool.give_back("k2", fresh, None)
    clock.now = 31  # old has waited 31 s, fresh 11 s
    assert pool.take("k") is None
    assert old.closed
    assert pool.take("k2") == (fresh, None)


def test_at_most_max_idle_wait_and_the_longest_waiting_goes_first():
    pool = ConsumerPool(max_idle=2, clock=Clock())
    consumers = [Consumer(str(i)) for i in range(3)]
    for i, c in enumerate(consumers):
        pool.give_back(i, c, None)
    assert [c.closed for c in consumers] == [True, False, False]
    assert len(pool) == 2


def test_close_all_closes_every_idle_consumer_even_if_one_fails_to_close():
    class Broken(Consumer):
        def close(self):
            raise RuntimeError("already closed")

    pool = ConsumerPool(clock=Clock())
    good = Consumer("good")
    pool.give_back("a", Broken("broken"), None)
    pool.give_back("b", good, None)
    pool.close_all()
    assert good.closed and len(pool) == 0
