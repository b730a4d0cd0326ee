"""Tests of browser_check.py: tiny pages with one kind of fault each must be reported with exit
status 1, a clean page must give 0 and a screenshot. Skipped where no Chromium is installed
(ci/setup.sh installs it).

Run with: /usr/bin/python3 -m unittest discover -s reports -p 'test_*.py'
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import browser_check  # noqa: E402

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
CHECK = os.path.join(HERE, "browser_check.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# A 1x1 PNG, so that the clean page has an image that loads.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000003010100c9fe92ef0000000049454e44ae426082")
HAVE_BROWSER = browser_check.find_browser() is not None


def run_check(*args, env=None):
    return subprocess.run([PYTHON, CHECK, "--timeout", "60", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def page(body):
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>t</title>"
            f"</head><body>{body}</body></html>\n")


class CommandLineTest(unittest.TestCase):
    def test_usage_errors(self):
        for args in ([], ["/nonexistent/report"], ["--timeout", "0", HERE]):
            r = run_check(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertTrue(r.stderr.startswith(browser_check.PREFIX), r.stderr)

    def test_no_browser_is_a_skip(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "index.html"), "w") as fh:
                fh.write(page("<p>x</p>"))
            r = run_check(tmp, env=dict(os.environ, PATH=tmp))
        self.assertEqual(r.returncode, browser_check.EXIT_SKIP, r.stderr)
        self.assertIn("ci/setup.sh", r.stderr)

    def test_help(self):
        r = subprocess.run([PYTHON, CHECK, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0)
        self.assertIn("Exit status", r.stdout)


@unittest.skipUnless(HAVE_BROWSER, "no Chromium on PATH (ci/setup.sh installs it)")
class PageFaultTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, body, files=()):
        """A fresh directory with index.html and the given files."""
        folder = tempfile.mkdtemp(dir=self.tmp.name)
        with open(os.path.join(folder, "index.html"), "w", encoding="utf-8") as fh:
            fh.write(page(body))
        for name in files:
            with open(os.path.join(folder, name), "wb") as fh:
                text = PIXEL if name.endswith(".png") else page("<h2 id=\"there\">x</h2>").encode()
                fh.write(text)
        return folder

    def check(self, body, files=()):
        folder = self.write(body, files)
        return run_check(folder), folder

    def assert_found(self, r, *texts):
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        for text in texts:
            self.assertIn(text, r.stdout, r.stdout + r.stderr)

    def test_clean_page(self):
        r, folder = self.check(
            "<p><a href=\"#s\">s</a> <a href=\"#top\">top</a> <a href=\"#\">up</a> "
            "<a href=\"other.html\">o</a> <a href=\"other.html#there\">t</a> "
            "<a href=\"https://example.org/\">e</a></p><h2 id=\"s\">S</h2>"
            "<p><img src=\"fig.png\" alt=\"f\"></p><script>console.log('fine')</script>",
            files=("fig.png", "other.html"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("external link, not followed: https://example.org/", r.stdout)
        self.assertIn("no problems on 1 page", r.stdout)
        with open(os.path.join(folder, "screenshot.png"), "rb") as fh:
            shot = fh.read()
        self.assertTrue(shot.startswith(PNG_MAGIC))
        self.assertGreater(len(shot), 100)

    def test_missing_image(self):
        r, _ = self.check("<p><img src=\"fig01.png\" alt=\"f\"></p>")
        # Reported once, as the image, though its request failed too.
        self.assert_found(r, "image not shown: fig01.png", "1 problem on 1 page")

    def test_broken_links(self):
        r, _ = self.check("<p><a href=\"missing.html\">m</a> <a href=\"#nowhere\">n</a> "
                          "<a href=\"other.html#gone\">g</a></p>", files=("other.html",))
        self.assert_found(r, "broken link: missing.html", "missing fragment: #nowhere",
                          "missing fragment: other.html#gone", "3 problems on 1 page")

    def test_console_error_and_exception(self):
        r, _ = self.check("<script>console.error('bad value', 42);</script>"
                          "<script>throw new Error('boom');</script>")
        self.assert_found(r, "console.error: bad value 42", "uncaught exception: Error: boom")

    def test_several_pages(self):
        clean = self.write("<p>fine</p>")
        faulty = self.write("<p><img src=\"gone.png\" alt=\"g\"></p>")
        r = run_check(clean, faulty)
        self.assert_found(r, f"{clean}/index.html: 0 problems",
                          f"{faulty}/index.html: image not shown: gone.png", "on 2 pages")
        for folder in (clean, faulty):
            self.assertTrue(os.path.isfile(os.path.join(folder, "screenshot.png")))


if __name__ == "__main__":
    unittest.main()
