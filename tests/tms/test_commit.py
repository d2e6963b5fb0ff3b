"""``GroupCommit``: callers' items go out in batches, one batch at a time, each batch
being what waited while the previous one was processed; threads and event loops share
it, and a caller's thread never processes other callers' later batches."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tms.commit import GroupCommit

WAIT_S = 30.0  # generous: only a hang would take that long


class Recorder:
    """A ``process`` that records each batch and the thread that processed it, and can
    be held inside a batch (``hold``) until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.threads: list[str] = []
        self.inside = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.fail_with: BaseException | None = None

    def hold(self) -> None:
        self.release.clear()

    def __call__(self, items: list[str]) -> None:
        self.batches.append(list(items))
        self.threads.append(threading.current_thread().name)
        self.inside.set()
        assert self.release.wait(WAIT_S)
        if self.fail_with is not None:
            raise self.fail_with


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="worker") as executor:
        yield executor


def _threads(commit: GroupCommit[str], names: list[str]) -> list[threading.Thread]:
    threads = [threading.Thread(target=commit.run, args=([name],), name=name) for name in names]
    for thread in threads:
        thread.start()
    return threads


def _queued(commit: GroupCommit[str], count: int) -> None:
    """Wait until ``count`` calls wait in the queue (behind a held batch)."""
    for _ in range(int(WAIT_S * 1000)):
        with commit._lock:
            if len(commit._queue) >= count:
                return
        threading.Event().wait(0.001)
    raise AssertionError("calls did not queue")


def test_threads_share_a_batch_and_the_leader_stops_after_its_own() -> None:
    # Given a first caller whose batch is held while three more call
    process = Recorder()
    commit: GroupCommit[str] = GroupCommit(process)
    process.hold()
    [first] = _threads(commit, ["a"])
    assert process.inside.wait(WAIT_S)
    later = _threads(commit, ["b", "c", "d"])
    _queued(commit, 3)
    # When the first batch ends
    process.release.set()
    for thread in [first, *later]:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    # Then the three went out together, processed by one of them, not by the first
    assert process.batches[0] == ["a"]
    assert sorted(process.batches[1]) == ["b", "c", "d"] and len(process.batches) == 2
    assert process.threads[0] == "a" and process.threads[1] in ("b", "c", "d")


def test_calls_of_one_loop_turn_are_one_batch_and_later_ones_the_next(
    pool: ThreadPoolExecutor,
) -> None:
    process = Recorder()
    commit: GroupCommit[str] = GroupCommit(process, executor=pool)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = [commit.submit([f"t1-{i}"], loop) for i in range(5)]
        await asyncio.gather(*first)
        # a batch held in progress: what comes meanwhile waits for the next one
        process.inside.clear()
        process.hold()
        held = commit.submit(["x"], loop)
        await loop.run_in_executor(None, process.inside.wait, WAIT_S)
        meanwhile = [commit.submit([f"t2-{i}"], loop) for i in range(3)]
        process.release.set()
        await asyncio.gather(held, *meanwhile)

    asyncio.run(scenario())
    assert process.batches == [
        [f"t1-{i}" for i in range(5)],
        ["x"],
        [f"t2-{i}" for i in range(3)],
    ]
    assert all(name.startswith("worker") for name in process.threads)


def test_threads_and_loops_share_batches_and_nobody_is_left_waiting(
    pool: ThreadPoolExecutor,
) -> None:
    # Given a thread's batch held, and a loop's call queued behind it
    process = Recorder()
    commit: GroupCommit[str] = GroupCommit(process, executor=pool)
    process.hold()
    [leader] = _threads(commit, ["thread"])
    assert process.inside.wait(WAIT_S)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        waiting = commit.submit(["loop"], loop)
        _queued(commit, 1)
        # When the thread's batch ends
        process.release.set()
        # Then the loop's call goes out on a worker, the thread returns at once
        await asyncio.wait_for(waiting, WAIT_S)

    asyncio.run(scenario())
    leader.join(WAIT_S)
    assert process.batches == [["thread"], ["loop"]]
    assert process.threads[0] == "thread" and process.threads[1].startswith("worker")


def test_a_failing_batch_fails_its_callers_only(pool: ThreadPoolExecutor) -> None:
    process = Recorder()
    commit: GroupCommit[str] = GroupCommit(process, executor=pool)
    process.fail_with = RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        commit.run(["x"])

    async def failing() -> None:
        with pytest.raises(RuntimeError, match="a bug"):
            await commit.submit(["y"], asyncio.get_running_loop())

    asyncio.run(failing())
    process.fail_with = None
    commit.run(["z"])
    assert process.batches == [["x"], ["y"], ["z"]]


def test_without_an_executor_loop_calls_fail_and_threads_go_on() -> None:
    process = Recorder()
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    commit: GroupCommit[str] = GroupCommit(process, executor=pool)

    async def submit() -> None:
        with pytest.raises(RuntimeError, match="shutdown"):
            await commit.submit(["lost"], asyncio.get_running_loop())

    asyncio.run(submit())
    commit.run(["thread"])
    assert process.batches == [["thread"]]
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError, match="no executor"):
            GroupCommit(process).submit(["x"], loop)
    finally:
        loop.close()


def test_the_other_callers_of_a_failing_batch_get_the_mapped_error() -> None:
    # Given a batch held while two more callers queue, and a process that will fail
    process = Recorder()
    commit: GroupCommit[str] = GroupCommit(process, failed=lambda exc: ValueError(f"{exc}!"))
    outcomes: dict[str, str] = {}

    def call(name: str) -> None:
        try:
            commit.run([name])
        except Exception as exc:
            outcomes[name] = f"{type(exc).__name__}: {exc}"

    process.hold()
    process.fail_with = RuntimeError("a bug")
    first = threading.Thread(target=call, args=("a",))
    first.start()
    assert process.inside.wait(WAIT_S)
    later = [threading.Thread(target=call, args=(name,)) for name in "bc"]
    for thread in later:
        thread.start()
    _queued(commit, 2)
    # When it fails
    process.release.set()
    for thread in [first, *later]:
        thread.join(WAIT_S)
    # Then each leader gets the error itself, the one it led for the mapped one
    assert outcomes["a"] == "RuntimeError: a bug"
    assert sorted([outcomes["b"], outcomes["c"]]) == ["RuntimeError: a bug", "ValueError: a bug!"]


def test_group_commits_sharing_an_executor_take_turns_batch_by_batch() -> None:
    # Given two group commits on one worker thread, the first's batch held
    order: list[str] = []
    first, second = Recorder(), Recorder()
    first.hold()

    def recording(process: Recorder, name: str) -> Callable[[list[str]], None]:
        def run(items: list[str]) -> None:
            order.append(f"{name}:{','.join(items)}")
            process(items)

        return run

    with ThreadPoolExecutor(1) as one:
        a: GroupCommit[str] = GroupCommit(recording(first, "a"), executor=one)
        b: GroupCommit[str] = GroupCommit(recording(second, "b"), executor=one)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            held = a.submit(["1"], loop)
            await loop.run_in_executor(None, first.inside.wait, WAIT_S)
            # When more comes for the first, and then for the second
            more = a.submit(["2"], loop)
            other = b.submit(["x"], loop)
            await asyncio.sleep(0.01)
            first.release.set()
            await asyncio.gather(held, more, other)

        asyncio.run(scenario())
    # Then the second's batch went before the first's next one
    assert order == ["a:1", "b:x", "a:2"]
