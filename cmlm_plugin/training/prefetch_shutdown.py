"""Stop fairseq's batch-prefetch threads before the interpreter shuts down.

fairseq-train reads batches through ``fairseq.data.iterators.BufferedIterator``
(``--data-buffer-size``, 10 by default): a daemon ``BackgroundConsumer`` thread
collates the next batches into a queue. When training stops (``--max-update``,
``--max-epoch`` in mid-epoch, an error) that thread is usually still collating. At
interpreter exit CPython ends a daemon thread that wants the GIL back by calling
``pthread_exit``; a thread inside a torch operator unwinds through C++ frames that
must not unwind, and the process aborts with ``terminate called without an active
exception`` (exit status -6 / 134) after the checkpoint has been saved. The outcome
depends on thread timing, so it shows as an intermittent failure of a finished run.

``stop_prefetch_threads`` runs at exit (``atexit``, which CPython calls while
daemon threads still run normally): it tells each live consumer to stop after its
current batch and drains its queue until it has ended, so no thread is inside torch
when the interpreter finalizes. It touches two attributes of fairseq's consumer
(``_max_len``, ``_queue``, the same names in fairseq 0.12.x and main); a consumer
that does not stop within ``timeout`` seconds is left as fairseq leaves it.
"""

import atexit
import queue
import threading
import time

from fairseq.data.iterators import BackgroundConsumer


def _stop(consumer: BackgroundConsumer, deadline: float) -> None:
    consumer._max_len = 0  # the loop breaks after the batch it is collating
    while consumer.is_alive() and time.monotonic() < deadline:
        try:  # free a slot, in case the consumer waits on a full queue
            consumer._queue.get_nowait()
        except queue.Empty:
            pass
        consumer.join(0.01)


def stop_prefetch_threads(timeout: float = 10.0) -> int:
    """Stop every live fairseq prefetch thread; return how many were stopped."""
    deadline = time.monotonic() + timeout
    consumers = [
        t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()
    ]
    for consumer in consumers:
        _stop(consumer, deadline)
    return sum(not c.is_alive() for c in consumers)


def install() -> None:
    """Run ``stop_prefetch_threads`` at interpreter exit (once per process)."""
    if not getattr(install, "_done", False):
        atexit.register(stop_prefetch_threads)
        install._done = True
