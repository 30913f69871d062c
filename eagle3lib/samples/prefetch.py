"""Read ahead: run an iterator in a background thread, a bounded number of items ahead of its consumer.

Replay uses it to overlap reading and preparing samples (disk reads, layout, reference) with the draft forward:
safetensors reads and torch ops release the GIL, so the two run at the speed of the slower one (issue 18, item 3).
"""
from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

X = TypeVar("X")
_ITEM, _ERROR, _END = "item", "error", "end"


def ahead(items: Iterable[X], depth: int = 2) -> Iterator[X]:
    """Yield the items of `items` in order, produced by a worker thread at most `depth` items ahead (depth <= 0:
    no thread). An exception raised while producing is raised here, in the consumer; closing the generator early
    stops the worker after the item it is producing."""
    if depth <= 0:
        yield from items
        return
    box: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(msg) -> bool:
        while not stop.is_set():
            try:
                box.put(msg, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            for x in items:
                if not put((_ITEM, x)):
                    return
        except BaseException as e:  # noqa: BLE001  (handed to the consumer, which raises it)
            put((_ERROR, e))
            return
        put((_END, None))

    worker = threading.Thread(target=work, name="eagle3lib-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            kind, x = box.get()
            if kind == _ITEM:
                yield x
            elif kind == _ERROR:
                raise x
            else:
                return
    finally:
        stop.set()
        worker.join()
