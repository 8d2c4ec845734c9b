"""`report.html`: the report as one self-contained page to share (`replay report DIR --html`).

The page is report.md rendered (tables, provenance, the experiment file) with every figure inlined
as its SVG (PNG as a data URI when no SVG was drawn). Nothing is fetched: no scripts, fonts or
style sheets from elsewhere, no links to the figure files. Inlined SVGs get their element ids
prefixed per figure, since matplotlib names the same ids (`figure_1`, `axes_1`, ...) in every file
and one page must not hold two of each.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

__all__ = ["HTML_NAME", "render_html", "inline_svg"]

HTML_NAME = "report.html"

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.85rem; }
pre { background: #f7f7f7; padding: 0.75rem; overflow-x: auto; }
figure.fig { margin: 1rem 0 2rem; }
figure.fig svg, figure.fig img { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #555; }
"""

_IMAGE = re.compile(r'<p><img src="([^"]+)" alt="([^"]*)"\s*/?></p>')
_SVG_LINK = re.compile(r"^\[SVG\]\([^)]*\)\s*$", re.M)


def inline_svg(text: str, prefix: str) -> str:
    """An SVG file's markup for inlining into HTML: no XML prolog or DOCTYPE, ids and their
    references (`#id`, `url(#id)`) prefixed with `prefix`."""
    text = re.sub(r"<\?xml[^>]*\?>", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text, flags=re.S)
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', text)
    text = re.sub(r'(href=")#([^"]+)"', lambda m: f'{m.group(1)}#{prefix}{m.group(2)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", text)
    return text.strip()


def _figure(root: Path, src: str, caption: str, index: int) -> str:
    path = root / src
    svg = path.with_suffix(".svg")
    cap = f"<figcaption>{html.escape(caption)}</figcaption>"
    if svg.is_file():
        body = inline_svg(svg.read_text(encoding="utf-8"), f"f{index}-")
    elif path.is_file():
        data = base64.b64encode(path.read_bytes()).decode()
        body = f'<img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
    else:
        body = f"<p>(figure file {html.escape(src)} is missing)</p>"
    return f'<figure class="fig">{body}{cap}</figure>'


def render_html(markdown_text: str, root: Path, title: str) -> str:
    """The page for report.md's `markdown_text`, figures read from under `root`."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    body = md.render(_SVG_LINK.sub("", markdown_text))
    counter = iter(range(1, 1 << 30))
    body = _IMAGE.sub(
        lambda m: _figure(
            root, html.unescape(m.group(1)), html.unescape(m.group(2)), next(counter)
        ),
        body,
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n{body}</body>\n</html>\n"
    )
