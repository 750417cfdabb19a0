"""A progress bar on stderr for long runs: drawn in place on a terminal,
as a line every few seconds otherwise, and not at all for runs shorter than
a second (nothing to wait for)."""

import sys
import time


class Progress:
    """``update(done)`` after each unit of work, ``close()`` at the end."""

    def __init__(self, total, label="step", stream=None, delay=1.0, interval=None):
        self.total, self.label = total, label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.delay = delay  # no bar before this many seconds (unless on a tty)
        self.interval = interval if interval is not None else (0.1 if self.tty else 5.0)
        self.start = time.perf_counter()
        self.last = None  # when the bar was last drawn
        self.drawn = False

    def _text(self, done, now):
        elapsed = now - self.start
        fraction = done / self.total if self.total else 1.0
        eta = elapsed / done * (self.total - done) if done else 0.0
        width = 30
        bar = "#" * int(fraction * width) + "-" * (width - int(fraction * width))
        return (f"[{bar}] {self.label} {done}/{self.total} {100 * fraction:5.1f}% "
                f"{elapsed:6.1f} s elapsed, {eta:6.1f} s left")

    def update(self, done):
        now = time.perf_counter()
        if not self.tty and now - self.start < self.delay:
            return
        if self.last is not None and now - self.last < self.interval and done < self.total:
            return
        self.last = now
        text = self._text(done, now)
        if self.tty:
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.drawn = True

    def close(self):
        if self.drawn and self.tty:
            self.stream.write("\n")
            self.stream.flush()
