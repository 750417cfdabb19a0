"""Which ranks of a collective meta-step are alive, so that a dead or cut-off
rank is named on every other rank in bounded time instead of hanging a
collective.

Two parts, both on the job's rendezvous store:

- ``Heartbeat``: a daemon thread per process that adds 1 to
  ``metafuse/beat/RANK`` every ``interval`` seconds over its own store
  connection (the main thread's waits never delay it).
- ``StepBarrier``: before a meta-step's all_reduce every rank marks its
  share done (``done/STEP/RANK``) and waits for the others' marks in short
  slices; between slices it names the ranks whose heartbeat has not moved
  for ``silence`` seconds (dead, or cut off), or once ``timeout`` has passed
  the ranks still missing (alive but slow). Each rank deletes its mark of
  two steps before, so the store does not grow.
"""

import datetime
import os
import threading
import time

from metafuse.distributed.errors import RankError

__all__ = ["Heartbeat", "StepBarrier", "DEFAULT_SILENCE", "HEARTBEAT_INTERVAL"]

HEARTBEAT_INTERVAL = 0.5
DEFAULT_SILENCE = 5.0
"""Seconds without a heartbeat after which a rank counts as gone."""

# A wait slice: torch logs a warning each time one runs out, so not shorter.
_SLICE = datetime.timedelta(seconds=1.0)


class Heartbeat:
    """This process's heartbeat (started once per process and rank).

    Args:
        connect: a function returning a new store connection.
        rank: this process's rank.
    """

    _running = {}

    def __init__(self, connect, rank):
        self.rank = rank
        self._connect = connect

    @classmethod
    def ensure(cls, connect, rank):
        """Starts the heartbeat of ``rank`` unless it runs."""
        if rank not in cls._running:
            beat = cls(connect, rank)
            thread = threading.Thread(target=beat._run, name=f"metafuse-heartbeat{rank}",
                                      daemon=True)
            thread.start()
            cls._running[rank] = beat

    def _run(self):
        key = f"metafuse/beat/{self.rank}"
        store = None
        while True:
            try:
                store = store or self._connect()
                store.add(key, 1)
            except Exception:  # noqa: BLE001 - the store is unreachable: retry
                store = None
            time.sleep(HEARTBEAT_INTERVAL)


def _slice_ended(exc):
    """Whether a store wait failed by running out of time (not for want of
    the store)."""
    text = str(exc).lower()
    return "timeout" in text or "timed out" in text


class StepBarrier:
    """Waits until every rank of a meta-step finished its share, or names
    the ones that cannot (``RankError``).

    Args:
        store: the store (this scheduler's prefix for the marks).
        beats: the store the heartbeats are in (unprefixed).
        rank: this process's rank.
        ranks: the ranks of the step.
        timeout: seconds a live rank may take to finish its share.
        silence: seconds without a heartbeat that count as gone.
        store_ranks: the ranks on the store's host (named if it is gone).
    """

    def __init__(self, store, beats, rank, ranks, timeout, silence=DEFAULT_SILENCE,
                 store_ranks=(0,)):
        self.store, self.beats, self.rank, self.ranks = store, beats, rank, list(ranks)
        self.timeout, self.silence, self.store_ranks = timeout, silence, list(store_ranks)
        self._seen = {}  # rank -> (heartbeat count, local time it was first seen)

    def _silent(self, ranks, now):
        silent = []
        for r in ranks:
            count = int(self.beats.add(f"metafuse/beat/{r}", 0))
            last = self._seen.get(r)
            if last is None or last[0] != count:
                self._seen[r] = (count, now)
            elif now - last[1] >= self.silence:
                silent.append(r)
        return silent

    def wait(self, step):
        """Marks this rank's share of ``step`` done and waits for the others.

        Raises:
            RankError: a rank is silent, late past the timeout, or the
                store cannot be reached (naming the store's host's ranks).
        """
        start = time.monotonic()
        try:
            self.store.set(f"done/{step}/{self.rank}", "1")
            if step >= 2:
                self.store.delete_key(f"done/{step - 2}/{self.rank}")
            keys = [f"done/{step}/{r}" for r in self.ranks if r != self.rank]
            while keys:
                try:
                    self.store.wait(keys, _SLICE)
                    return
                except Exception as exc:  # noqa: BLE001 - a slice ran out, or the store is gone
                    if not _slice_ended(exc):
                        raise
                keys = [k for k in keys if not self.store.check([k])]
                missing = [int(k.rsplit("/", 1)[1]) for k in keys]
                now = time.monotonic()
                silent = self._silent(missing, now) if missing else []
                if silent:
                    raise RankError(silent, "silent", step, self.silence)
                if missing and now - start > self.timeout:
                    raise RankError(missing, "timeout", step, now - start)
        except RankError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store itself is unreachable
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RankError([r for r in self.store_ranks if r != self.rank] or self.store_ranks,
                            "unreachable", step, time.monotonic() - start,
                            f"rendezvous store at {os.environ.get('MASTER_ADDR')}:"
                            f"{os.environ.get('MASTER_PORT')}: {first}") from None

    def name_after_failure(self, step):
        """After a collective failed: the ranks that went silent, waiting up
        to ``silence`` seconds plus a heartbeat for their counters to show
        it (an empty list if every rank still beats)."""
        others = [r for r in self.ranks if r != self.rank]
        deadline = time.monotonic() + self.silence + 2 * HEARTBEAT_INTERVAL
        self._seen = {}
        while True:
            now = time.monotonic()
            try:
                silent = self._silent(others, now)
            except Exception:  # noqa: BLE001 - the store is gone with its host
                return [r for r in self.store_ranks if r != self.rank]
            if silent or now > deadline:
                return silent
            time.sleep(HEARTBEAT_INTERVAL / 2)
