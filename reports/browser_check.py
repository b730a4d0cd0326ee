#!/usr/bin/python3
"""Opens HTML reports in headless Chromium and lists what is broken on them.

Each page is loaded from its file:// URL; one line is printed per problem:
  - an <img> that did not load (not complete, or naturalWidth 0);
  - a fragment link naming no id (or <a name>) in the page; "#" and "#top" always count as found;
  - a link to a local file that does not exist, or whose fragment names nothing in that file
    (local HTML files are parsed for their id and name attributes);
  - a console message of type error or assert, an uncaught exception, a log entry of level error;
  - a request that failed, or that was answered with an HTTP status of 400 or more.
Links to other schemes (http, https, mailto, ...) are listed, not followed: checks run without a
network. A full-page screenshot is written beside each page: screenshot.png for index.html,
NAME-screenshot.png for NAME.html.

Chromium runs with a throwaway profile and is driven through the DevTools protocol over a pipe
(--remote-debugging-pipe: it reads commands on fd 3 and writes on fd 4, each message JSON ended
by a NUL byte). Every wait is bounded by --timeout, and the browser is killed on every way out.
Standard library only.

Exit status: 0 no problems; 1 problems found, or the browser failed or ran past --timeout;
2 usage; 77 no Chromium on PATH (ci/setup.sh installs Debian's chromium).
"""

import argparse
import base64
import fcntl
import html.parser
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

PREFIX = "browser check: "
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
EXIT_SKIP = 77

# Runs in the page after its load event: what the checks need from the DOM.
PAGE_SCRIPT = """(() => {
  const ids = new Set();
  for (const e of document.querySelectorAll('[id]')) ids.add(e.id);
  for (const e of document.querySelectorAll('a[name]')) ids.add(e.getAttribute('name'));
  return {
    url: location.href,
    images: Array.from(document.images, i => ({
      src: i.getAttribute('src'), url: i.currentSrc || i.src, complete: i.complete,
      width: i.naturalWidth})),
    links: Array.from(document.querySelectorAll('a[href]'), a => ({
      href: a.getAttribute('href'), url: a.href})),
    ids: Array.from(ids),
  };
})()"""


class UsageError(Exception):
    """Bad command line (exit status 2)."""


class BrowserError(Exception):
    """The browser failed, or did not answer in time; the check cannot be completed."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{one_line(message)} (see --help)")


def one_line(text):
    return " ".join(str(text).split())


def count(n, noun):
    return f"{n} {noun}{'' if n == 1 else 's'}"


def find_browser(given=None):
    """The browser's path: --browser if given, else the first of BROWSERS on PATH, else None."""
    if given:
        return shutil.which(given)
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


# --------------------------------------------------------------------------------------------
# The browser, spoken to through the DevTools protocol over a pipe

class Browser:
    def __init__(self, exe, deadline, width=1280, height=1000):
        self.deadline = deadline
        self.next_id = 0
        self.events = []
        self.buffer = b""
        self.proc = None
        self.profile = tempfile.mkdtemp(prefix="parity-browser-")
        self.log = open(os.path.join(self.profile, "stderr.txt"), "w+b")
        # Both pipes' child ends are moved to fds 10+ first, so that placing them on 3 and 4 in
        # the child cannot overwrite one with the other.
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        child_in = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_r)
        os.close(from_w)
        self.wfd, self.rfd = to_w, from_r

        def place_fds():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update",
                "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
                "--force-device-scale-factor=1", f"--window-size={width},{height}", "about:blank"]
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                         stderr=self.log, pass_fds=(3, 4), preexec_fn=place_fds,
                                         start_new_session=True)
        except OSError as exc:
            self.close()
            raise BrowserError(f"cannot start {exe}: {exc.strerror or exc}") from None
        finally:
            os.close(child_in)
            os.close(child_out)
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)

    def stderr_tail(self, lines=5):
        try:
            self.log.flush()
            self.log.seek(0)
            text = self.log.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return " | ".join(text[-lines:])

    def died(self, what):
        status = self.proc.poll() if self.proc else None
        tail = self.stderr_tail()
        return BrowserError(f"{what} (browser exit status {status})"
                            + (f"; its last output: {tail}" if tail else ""))

    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.wfd], [], left)[1]:
                raise BrowserError(f"the browser did not take {method} within the time limit")
            try:
                data = data[os.write(self.wfd, data):]
            except BlockingIOError:
                continue
            except OSError:
                raise self.died(f"the browser stopped reading (sending {method})") from None
        return self.next_id

    def receive(self, until):
        """The next message, or None once the clock passes `until`."""
        while b"\0" not in self.buffer:
            left = until - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.rfd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise self.died("the browser closed its pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        try:
            return json.loads(raw)
        except ValueError:
            raise BrowserError(f"the browser sent something that is not JSON: {raw[:80]!r}") \
                from None

    def call(self, method, params=None, session=None):
        """Sends a command and returns its result; events that come meanwhile are kept."""
        wanted = self.send(method, params, session)
        while True:
            msg = self.receive(self.deadline)
            if msg is None:
                raise BrowserError(f"no answer to {method} within the time limit")
            if msg.get("id") == wanted:
                if "error" in msg:
                    raise BrowserError(f"{method} failed: {one_line(msg['error'].get('message'))}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method, session):
        """Waits for an event (kept ones first); True when it came in time."""
        seen = 0
        while True:
            for msg in self.events[seen:]:
                if msg["method"] == method and msg.get("sessionId") == session:
                    return True
            seen = len(self.events)
            msg = self.receive(self.deadline)
            if msg is None:
                return False
            if "method" in msg:
                self.events.append(msg)

    def listen(self, until):
        """Keeps the events that come before `until`."""
        while True:
            msg = self.receive(min(until, self.deadline))
            if msg is None:
                return
            if "method" in msg:
                self.events.append(msg)

    def close(self):
        """Asks the browser to close, then kills its process group whatever it did."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.deadline = time.monotonic() + 3
                try:
                    self.send("Browser.close")
                    self.proc.wait(timeout=3)
                except (BrowserError, subprocess.TimeoutExpired):
                    pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for fd in ("wfd", "rfd"):
            if getattr(self, fd, None) is not None:
                os.close(getattr(self, fd))
                setattr(self, fd, None)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# One page

class Anchors(html.parser.HTMLParser):
    """The id attributes of a local HTML file, and the name attributes of its <a> elements."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if value is not None and (key == "id" or (key == "name" and tag == "a")):
                self.names.add(value)


def file_anchors(path, cache):
    if path not in cache:
        parser = Anchors()
        with open(path, encoding="utf-8", errors="replace") as fh:
            parser.feed(fh.read())
        cache[path] = parser.names
    return cache[path]


def fragment_found(fragment, names):
    """HTML's rule: an empty fragment or "top" is the top of the page; otherwise the fragment,
    as written or percent-decoded, must be an id or an <a name>."""
    if fragment == "" or fragment.lower() == "top":
        return True
    return fragment in names or urllib.parse.unquote(fragment) in names


def link_problems(links, page_path, page_names, external):
    problems, cache = [], {}
    for link in links:
        parts = urllib.parse.urlsplit(link["url"])
        shown = link["href"]
        if parts.scheme != "file":
            external.append(link["url"])
            continue
        path = urllib.request.url2pathname(parts.path)
        if os.path.realpath(path) == os.path.realpath(page_path):
            if not fragment_found(parts.fragment, page_names):
                problems.append(f"link to a missing fragment: {shown}")
            continue
        if not os.path.exists(path):
            problems.append(f"broken link: {shown} ({path} does not exist)")
        elif parts.fragment and os.path.isfile(path) and path.lower().endswith((".html", ".htm")):
            if not fragment_found(parts.fragment, file_anchors(path, cache)):
                problems.append(f"link to a missing fragment: {shown} (not in {path})")
    return problems


def event_problems(events, session, reported):
    """Console errors, exceptions, error log entries and failed requests, in the order they came.
    A request for a URL in `reported` (an image already reported) is not reported again."""
    urls, failed, problems, logged = {}, set(reported), [], []
    for msg in events:
        if msg.get("sessionId") != session:
            continue
        method, p = msg["method"], msg.get("params", {})
        if method == "Network.requestWillBeSent":
            urls[p["requestId"]] = p["request"]["url"]
        elif method == "Network.loadingFailed":
            url = urls.get(p["requestId"], "?")
            if url not in failed:
                problems.append(f"request failed: {url} ({p.get('errorText', '')})")
            failed.add(url)
        elif method == "Network.responseReceived":
            r = p.get("response", {})
            if r.get("status", 0) >= 400:
                if r.get("url") not in failed:
                    problems.append(f"HTTP {r['status']}: {r.get('url')}")
                failed.add(r.get("url"))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = [str(a.get("value", a.get("description", a.get("type", ""))))
                    for a in p.get("args", [])]
            problems.append(f"console.{p['type']}: {one_line(' '.join(args))}"
                            + where(p.get("stackTrace", {}).get("callFrames", [{}])[:1]))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            text = (d.get("exception", {}).get("description") or d.get("text", "")).strip()
            problems.append(f"uncaught exception: {one_line(text.splitlines()[0] if text else '')}"
                            + where([{"url": d.get("url"), "lineNumber": d.get("lineNumber")}]))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            logged.append(p["entry"])
    # A failed request is also logged by the browser; it is reported once, as the request.
    for entry in logged:
        if not (entry.get("source") == "network" and entry.get("url") in failed):
            problems.append(f"error logged ({entry.get('source')}): {one_line(entry.get('text'))}")
    return problems


def where(frames):
    if not frames or not frames[0].get("url"):
        return ""
    line = frames[0].get("lineNumber")
    return f" at {frames[0]['url']}" + (f":{line + 1}" if isinstance(line, int) else "")


def screenshot_path(page_path):
    folder, name = os.path.split(page_path)
    stem = os.path.splitext(name)[0]
    return os.path.join(folder, "screenshot.png" if stem == "index" else f"{stem}-screenshot.png")


def check_page(browser, page_path, settle):
    """(problems, external links, screenshot path) of one page."""
    url = "file://" + urllib.request.pathname2url(page_path)
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget",
                           {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        browser.call(f"{domain}.enable", session=session)
    problems, not_shown = [], set()
    nav = browser.call("Page.navigate", {"url": url}, session)
    if nav.get("errorText"):
        problems.append(f"page did not load: {nav['errorText']}")
    elif not browser.wait_event("Page.loadEventFired", session):
        raise BrowserError(f"{page_path} did not finish loading within the time limit")
    # Late console messages and failures (timers, image decoding) are given a moment.
    browser.listen(time.monotonic() + settle)
    dom = browser.call("Runtime.evaluate", {"expression": PAGE_SCRIPT, "returnByValue": True},
                       session)
    if "exceptionDetails" in dom:
        raise BrowserError("the page script failed: "
                           + one_line(dom["exceptionDetails"].get("text", "")))
    dom = dom["result"]["value"]
    for img in dom["images"]:
        if not img["src"]:
            problems.append("image without src")
        elif not img["complete"] or img["width"] == 0:
            problems.append(f"image not shown: {img['src']} ({img['url']})")
            not_shown.add(img["url"])
    external = []
    problems += link_problems(dom["links"], page_path, set(dom["ids"]), external)
    problems += event_problems(browser.events, session, not_shown)

    size = browser.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
    shot = browser.call("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True, "optimizeForSpeed": True,
        "clip": {"x": 0, "y": 0, "width": max(1, size["width"]), "height": max(1, size["height"]),
                 "scale": 1}}, session)
    out = screenshot_path(page_path)
    with open(out, "wb") as fh:
        fh.write(base64.b64decode(shot["data"]))
    browser.call("Target.closeTarget", {"targetId": target})
    return problems, external, out


# --------------------------------------------------------------------------------------------
# Command line

def build_parser():
    p = Parser(
        prog="browser_check.py",
        description="Open HTML reports in headless Chromium and print one line per problem: an "
                    "image that is not shown, a link to a missing file or fragment, a console "
                    "error or assertion, an uncaught exception, an error logged by the browser, "
                    "a failed request or an HTTP status >= 400. Links to http(s) and other "
                    "schemes are listed but not followed. A full-page screenshot is written "
                    "beside each page (screenshot.png for index.html, NAME-screenshot.png for "
                    "NAME.html).",
        epilog="Exit status: 0 no problems; 1 problems found, or the browser failed or ran past "
               "--timeout; 2 usage; 77 no Chromium found (looked for "
               + ", ".join(BROWSERS) + " on PATH; ci/setup.sh installs Debian's chromium).")
    p.add_argument("pages", metavar="REPORT", nargs="*",
                   help="a report directory (its index.html is opened) or an HTML file")
    p.add_argument("--browser", metavar="EXE",
                   help="the Chromium or Chrome executable (default: the first of "
                        + ", ".join(BROWSERS) + " on PATH)")
    p.add_argument("--which", action="store_true",
                   help="print the browser that would be used and exit (77 when there is none)")
    p.add_argument("--timeout", metavar="S", type=float, default=60,
                   help="time limit in seconds for the whole check, browser start included "
                        "(default 60)")
    p.add_argument("--settle", metavar="S", type=float, default=0.3,
                   help="seconds to keep listening after each page's load event (default 0.3)")
    return p


def page_paths(args):
    paths = []
    for given in args.pages:
        path = os.path.abspath(given)
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not os.path.isfile(path):
            raise UsageError(f"no such page: {path}")
        paths.append(path)
    return paths


def run(argv):
    args = build_parser().parse_args(argv)
    if not args.timeout > 0 or not args.settle >= 0:
        raise UsageError("--timeout must be positive and --settle not negative")
    if not args.pages and not args.which:
        raise UsageError("no report given (see --help)")
    paths = page_paths(args)
    exe = find_browser(args.browser)
    if not exe:
        which = args.browser or " or ".join(BROWSERS)
        sys.stderr.write(f"{PREFIX}skipped: no {which} on PATH "
                         "(as root, bash ci/setup.sh installs Debian's chromium)\n")
        return EXIT_SKIP
    if args.which:
        print(exe)
        return 0
    deadline = time.monotonic() + args.timeout
    browser = Browser(exe, deadline)
    total = 0
    try:
        for path in paths:
            problems, external, shot = check_page(browser, path, args.settle)
            for line in problems:
                print(f"{path}: {line}")
            for url in sorted(set(external)):
                print(f"{path}: external link, not followed: {url}")
            total += len(problems)
            print(f"{path}: {count(len(problems), 'problem')}, "
                  f"screenshot {shot}")
    finally:
        browser.close()
    found = count(total, "problem") if total else "no problems"
    print(f"{PREFIX}{found} on {count(len(paths), 'page')}")
    return 1 if total else 0


def stop(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        return run(argv)
    except UsageError as exc:
        sys.stderr.write(f"{PREFIX}{exc}\n")
        return 2
    except BrowserError as exc:
        sys.stderr.write(f"{PREFIX}{one_line(exc)}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{PREFIX}interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
