"""Rendering shared by the report and the comparison page: strings from the data made safe for
each output, the Jinja environments, SVG inlining and the LaTeX-to-PDF step.

The tables are untrusted (issue 22: people exchange result folders): every string from the data
is escaped for HTML (autoescaping, plus `html_text` dropping control characters, zero-width
characters and bidirectional overrides), for LaTeX (`tex_escape`, `tex_cell`) and for the
terminal (`plain`); latexmk runs -norc and -no-shell-escape in a fresh private folder
(`compile_pdf`). The templates and figure captions are read from the checkout's report/ folder
(REPORT_DIR).
"""

from __future__ import annotations

import functools
import pathlib
import re
import shutil
import subprocess
import tempfile
import unicodedata
from collections.abc import Iterable

import jinja2
from markupsafe import Markup

from ddpbench import REPO_ROOT
from ddpbench.core import safe_io


def _report_dir() -> pathlib.Path:
    """report/ of the checkout: next to src/ (editable install) or in the working directory
    (the workflow runs from the repository root, also with a non-editable install)."""
    here = REPO_ROOT / "report"
    return here if (here / "templates").is_dir() else pathlib.Path.cwd() / "report"


REPORT_DIR = _report_dir()
TEMPLATES = REPORT_DIR / "templates"
CAPTIONS = REPORT_DIR / "captions"


# -- text from the data ----------------------------------------------------------------------

# Control characters (escape sequences), zero-width characters and bidirectional overrides: never
# shown, in a page or on a terminal. Tab and newline are kept (plain turns them into spaces).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def html_text(value):
    """Drop the characters a page must not show (CONTROL) from a string; autoescaping does the rest."""
    return value if isinstance(value, Markup) or not isinstance(value, str) else CONTROL.sub("", value)


def plain(value, limit: int = 80) -> str:
    """A string from the data for the terminal: control characters (escape sequences) and
    bidirectional overrides dropped, newlines as spaces, at most `limit` characters."""
    s = CONTROL.sub("", str(value).replace("\n", " ").replace("\t", " "))
    return s if len(s) <= limit else s[: limit - 1] + "…"


_SVG_HEAD = re.compile(r"^.*?(?=<svg)", re.S)


def inline_svg(svg: str, prefix: str) -> str:
    """An SVG document's text as an inline element: the XML head and the <metadata> block (RDF
    names and matplotlib's URL, not needed) dropped, ids prefixed so several figures never collide."""
    text = _SVG_HEAD.sub("", svg)
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'id="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)


# -- LaTeX -------------------------------------------------------------------------------------

_TEX = {
    # Replacements that exist in the default OT1 encoding (no T1/lmodern needed).
    "\\": r"$\backslash$", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\~{}", "^": r"\^{}", "<": r"$<$", ">": r"$>$", "|": r"$|$",
    "–": "--", "—": "---", "−": "-", "×": r"$\times$", "α": r"$\alpha$", "·": r"$\cdot$", "²": r"$^2$",
    "≥": r"$\geq$", "≤": r"$\leq$", "∞": r"$\infty$", "→": r"$\rightarrow$", "`": "", "\n": " ", "\r": " ", "\t": " ",
    # Braced so that no value is read as an optional argument or a star: a cell starting with '[' after \\,
    # \rowcolor, \toprule or \midrule was taken for one ("Missing number", no PDF); a '*' after \\ vanished.
    "[": "{[}", "]": "{]}", "*": "{*}",
    # The Latin-1 characters pdflatex's utf8 input cannot set in OT1 (they need T1).
    "«": r"$\ll$", "»": r"$\gg$", "Ð": "D", "ð": "d", "Þ": "Th", "þ": "th",
}  # fmt: skip


class TexRaw(str):
    """Text already in LaTeX (e.g. a figure path); not escaped."""


@functools.lru_cache(maxsize=4096)
def _tex_char(ch: str) -> str:
    if ch in _TEX:
        return _TEX[ch]
    if ch.isascii():
        return ch if ch.isprintable() else ""  # control characters are invalid input to TeX
    if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
        return ""
    if ord(ch) <= 0xFF:
        return ch  # pdflatex+utf8 in OT1 sets Latin-1 (but the few in _TEX)
    ascii_ = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()  # 'ő' -> 'o', '＄' -> '$'
    return "".join(map(_tex_char, ascii_)) if ascii_ else "?"


def tex_escape(value) -> str:
    """Any text as LaTeX that sets it literally: specials escaped, brackets braced, control characters dropped,
    characters pdflatex cannot set in OT1 approximated in ASCII or '?'."""
    if isinstance(value, TexRaw):
        return value
    return "".join(map(_tex_char, str(value)))


_LONG_WORD = re.compile(r"\S{21,}")


def tex_cell(value, limit: int | None = None) -> TexRaw:
    """Text for a table cell or caption: at most `limit` characters (then '...'; an `l` column never wraps,
    so a long name would push the rest of the table off the page), and words longer than 20 characters
    breakable every 20 (a long name or path wraps in a `p` column instead of running over it)."""
    text = str(value)
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    out, pos = [], 0
    for word in _LONG_WORD.finditer(text):
        out.append(tex_escape(text[pos : word.start()]))
        out.append(r"\allowbreak{}".join(tex_escape(word[0][i : i + 20]) for i in range(0, len(word[0]), 20)))
        pos = word.end()
    out.append(tex_escape(text[pos:]))
    return TexRaw("".join(out))


# -- pages -----------------------------------------------------------------------------------


def jinja_env(kind: str, templates: pathlib.Path = TEMPLATES) -> jinja2.Environment:
    """The Jinja environment of an HTML page (autoescaped, control characters dropped) or of
    LaTeX (its own delimiters; every printed value escaped unless marked TexRaw)."""
    loader = jinja2.FileSystemLoader(str(templates))
    if kind == "html":
        return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined, finalize=html_text)
    # LaTeX-friendly delimiters; every printed value is escaped unless marked TexRaw.
    env = jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, autoescape=False,
        block_start_string="((*", block_end_string="*))", variable_start_string="(((",
        variable_end_string=")))", comment_start_string="((#", comment_end_string="#))",
        trim_blocks=True, lstrip_blocks=True, finalize=tex_escape,
    )  # fmt: skip
    env.filters["texraw"] = TexRaw  # macro output is LaTeX already
    env.filters["cell"] = tex_cell
    return env


def compile_pdf(tex: pathlib.Path, timeout: int = 600, assets: Iterable[str] = ()) -> tuple[bool, str]:
    """latexmk → PDF next to `tex`; returns (made, message). Without latexmk, says plainly that no PDF was made.

    The folder of `tex` may be someone else's: latexmk would run a latexmkrc found in its working folder
    as Perl. So it runs in a fresh private folder holding only copies of `tex` and `assets` (paths relative
    to tex's folder, e.g. the figures' PDFs), with -norc (no rc file of any folder, $HOME or the system is
    read) and -no-shell-escape; the PDF is copied back atomically, on failure the LaTeX log (tex's .log)."""
    if not shutil.which("latexmk"):
        return False, "No PDF was made: latexmk is not installed (Debian: texlive-latex-recommended texlive-latex-extra latexmk)."
    out, log = tex.parent, tex.with_suffix(".log")
    build = pathlib.Path(tempfile.mkdtemp(prefix="ddpbench-latex-"))
    try:
        safe_io.atomic_copy(tex, build / tex.name, root=build)
        for rel in assets:
            safe_io.atomic_copy(out / rel, build / rel, root=build)
        cmd = ["latexmk", "-norc", "-pdf", "-no-shell-escape", "-interaction=nonstopmode", "-halt-on-error",
               "-file-line-error", tex.name]  # fmt: skip
        try:
            proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=timeout)
            failed = f"latexmk failed (exit {proc.returncode})" if proc.returncode != 0 else ""
        except subprocess.TimeoutExpired:
            failed = f"latexmk exceeded {timeout} s"
        if not failed:
            safe_io.atomic_copy(build / tex.with_suffix(".pdf").name, tex.with_suffix(".pdf"))
            return True, f"PDF: {tex.with_suffix('.pdf')}"
        if (build / log.name).is_file():
            safe_io.atomic_copy(build / log.name, log)
            return False, f"No PDF was made: {failed}; see {log}."
        return False, f"No PDF was made: {failed}; no LaTeX log was written."
    finally:
        shutil.rmtree(build, ignore_errors=True)

