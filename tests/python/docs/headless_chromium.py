"""Opens pages in Debian's headless Chromium through the DevTools protocol
over a pipe (``--remote-debugging-pipe``: no port, no extra Python package)
and reports what a reader would see: the title, the counts of tables and of
images that loaded, and every console error, uncaught exception and failed
resource load. Used by test_docs_site.py.
"""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time


def find_chromium():
    """The Chromium executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium process; ``open(url)`` loads a page in a new tab."""

    def __init__(self, executable, timeout=60):
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="metafuse-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # the pipe protocol reads commands on fd 3 and writes answers on fd 4
        self._process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
             f"--user-data-dir={self._profile}", "--window-size=1280,2000",
             "--hide-scrollbars", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False,  # fds 3 and 4, set up below, must reach the browser
            preexec_fn=lambda: _pipe_fds(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events = []

    def _send(self, method, params=None, session=None):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("headless Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("headless Chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, params=None, session=None):
        """Sends one command and returns its result; events that arrive
        meanwhile are kept in ``events``."""
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method, session, seconds):
        deadline = time.monotonic() + seconds
        while True:
            for event in self.events:
                if event.get("method") == method and event.get("sessionId") == session:
                    return
            self.events.append(self._read_message(deadline))

    def open(self, url, screenshot=None):
        """Loads ``url`` and returns {"title", "tables", "api_entries" (autodoc
        entries), "images", "broken_images", "errors"}; with ``screenshot`` also writes a PNG of the first 1280x2000
        pixels there."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.events = []
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session, self.timeout)
        time.sleep(0.5)  # late console messages and images
        facts = self.call("Runtime.evaluate", {"returnByValue": True, "expression": """
            JSON.stringify({
              title: document.title,
              tables: document.querySelectorAll("article table, main table").length,
              api_entries: document.querySelectorAll("dl.py").length,
              images: Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length,
              broken_images: Array.from(document.images)
                  .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
            })"""}, session=session)["result"]["value"]
        result = json.loads(facts)
        if screenshot:
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
                      session=session)
            shot = self.call("Page.captureScreenshot", {"format": "png"}, session=session)
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        result["errors"] = [_describe(e) for e in self.events
                            if e.get("sessionId") == session and _is_error(e)]
        self.call("Target.closeTarget", {"targetId": target})
        return result

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)


def _pipe_fds(commands, answers):
    """In the child: ``commands`` on fd 3, ``answers`` on fd 4, both kept
    across exec (moved out of the way first: either may already be 3 or 4)."""
    commands, answers = os.dup(commands), os.dup(answers)
    os.dup2(commands, 3)
    os.dup2(answers, 4)
    os.set_inheritable(3, True)
    os.set_inheritable(4, True)


def _is_error(event):
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        return True
    if method == "Runtime.consoleAPICalled":
        return params.get("type") in ("error", "assert")
    if method == "Log.entryAdded":
        return params.get("entry", {}).get("level") == "error"
    return False


def _describe(event):
    params = event["params"]
    if event["method"] == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        return "exception: " + details.get("exception", {}).get("description", details["text"])
    if event["method"] == "Runtime.consoleAPICalled":
        return "console.error: " + " ".join(str(a.get("value", a.get("description")))
                                            for a in params.get("args", []))
    entry = params["entry"]
    return f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip()
