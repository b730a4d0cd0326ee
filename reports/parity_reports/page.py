"""The HTML page: its style sheet and the Page that sections add their text to."""

from .common import esc

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em auto;
       max-width: 1250px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; font-size: 0.86em; }
th, td { border: 1px solid #d4d4d4; padding: 0.15em 0.5em; vertical-align: top; }
th { background: #f0f0f0; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
tr.native td { font-weight: 600; }
.bad { color: #b00020; font-weight: 600; }
.good { color: #1b6e20; font-weight: 600; }
.note { color: #666; font-style: italic; }
.diff td { background: #fff4d6 !important; }
img { max-width: 100%; border: 1px solid #eee; }
code, .mono { font-family: Menlo, Consolas, monospace; font-size: 0.92em; }
details { margin: 0.3em 0 1em 0; }
summary { cursor: pointer; color: #245; }
ul.glance li { margin: 0.15em 0; }
nav a { margin-right: 1em; }
.incomplete { background: #fdecee; border: 1px solid #b00020; padding: 0.5em 0.8em; }
td.msg { font-family: Menlo, Consolas, monospace; font-size: 0.9em; white-space: pre-wrap;
         max-width: 60em; }
"""


NO_FIGURES = "<p class=\"note\">Drawn without figures (--no-figures).</p>"


class Page:
    def __init__(self, title, figures=True):
        """figures False: the page of a report drawn without its figures (--no-figures), which
        leaves their images out and says so under the title."""
        self.parts = []
        self.title = title
        self.figures = figures

    def add(self, text):
        self.parts.append(text)

    def p(self, text, cls=None):
        self.add(f"<p class=\"{cls}\">{text}</p>" if cls else f"<p>{text}</p>")

    def note(self, text):
        self.p(esc(text), "note")

    def img(self, fname, alt):
        if not self.figures:
            return
        self.add(f"<p><img src=\"{esc(fname)}\" alt=\"{esc(alt)}\"></p>")

    def table(self, header, rows, numeric=(), row_classes=None):
        """header: list of str; rows: list of lists of already-escaped cell html."""
        out = ["<table><thead><tr>"]
        for i, h in enumerate(header):
            out.append(f"<th class=\"num\">{esc(h)}</th>" if i in numeric else f"<th>{esc(h)}</th>")
        out.append("</tr></thead><tbody>")
        for j, row in enumerate(rows):
            cls = row_classes[j] if row_classes else ""
            out.append(f"<tr class=\"{cls}\">" if cls else "<tr>")
            for i, cell in enumerate(row):
                out.append(f"<td class=\"num\">{cell}</td>" if i in numeric else f"<td>{cell}</td>")
            out.append("</tr>")
        out.append("</tbody></table>")
        self.add("".join(out))

    def details(self, summary, body_fn):
        self.add(f"<details><summary>{esc(summary)}</summary>")
        body_fn()
        self.add("</details>")

    def render(self):
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{esc(self.title)}</title><style>{CSS}</style></head><body>\n"
                f"<h1>{esc(self.title)}</h1>\n" + ("" if self.figures else NO_FIGURES + "\n") +
                "\n".join(self.parts) + "\n</body></html>\n")
