"""Read ahead: run an iterator in a background thread, a bounded amount of work ahead of its consumer.

Replay uses it to overlap reading and preparing samples (disk reads, layout, reference) with the draft forward:
safetensors reads and torch ops release the GIL, so the two run at the speed of the slower one (issue 18, item 3).
The bound is a budget of `weight(item)` (replay: tokens), not of items: a replay batch gathers ~8k tokens, i.e.
tens of samples, and a reader allowed only two samples ahead would sit idle for most of every forward.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Iterable, Iterator, TypeVar

X = TypeVar("X")
_ITEM, _ERROR, _END = "item", "error", "end"


def ahead(items: Iterable[X], depth: int = 2, *, weight: Callable[[X], int] | None = None) -> Iterator[X]:
    """Yield the items of `items` in order, produced by a worker thread at most `depth` ahead of the consumer
    (depth <= 0: no thread). Ahead is counted in items, or in `weight(item)` units when `weight` is given; an
    item heavier than the whole budget still passes, alone. An exception raised while producing is raised here,
    in the consumer; closing the generator early stops the worker after the item it is producing."""
    if depth <= 0:
        yield from items
        return
    cost = weight or (lambda _x: 1)
    held: deque = deque()                       # (kind, item, weight) ready for the consumer
    state = {"weight": 0}
    lock = threading.Condition()
    stop = threading.Event()

    def put(kind, x, w: int = 0) -> bool:
        with lock:
            while held and state["weight"] + w > depth and not stop.is_set():
                lock.wait(timeout=0.05)
            if stop.is_set():
                return False
            held.append((kind, x, w))
            state["weight"] += w
            lock.notify_all()
            return True

    def work():
        try:
            for x in items:
                if not put(_ITEM, x, max(0, int(cost(x)))):
                    return
        except BaseException as e:  # noqa: BLE001  (handed to the consumer, which raises it)
            put(_ERROR, e)
            return
        put(_END, None)

    worker = threading.Thread(target=work, name="eagle3lib-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            with lock:
                while not held:
                    lock.wait()
                kind, x, w = held.popleft()
                state["weight"] -= w
                lock.notify_all()
            if kind == _ITEM:
                yield x
            elif kind == _ERROR:
                raise x
            else:
                return
    finally:
        stop.set()
        with lock:
            lock.notify_all()
        worker.join()
