"""The run's page as one self-contained HTML file: its CSS and JavaScript (page.css, page.js,
package files of this folder) inline, its data embedded as JSON, and a Content-Security-Policy
that forbids it any network request, so it works from file://.

The chat and the model's texts are untrusted (they may hold HTML or prompt injections): page.js
puts every text in the DOM with `textContent`, never as markup, and the embedded JSON has every
`<` escaped so that no text can close its <script> element. The same data gives the same bytes."""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Mapping
from importlib.resources import files
from typing import Any

from bench.viewer.data import PageInputs, page_data


def _package_text(name: str) -> str:
    """A text file of this package, as the <style> or <script> element holds it."""
    return "\n" + files("bench.viewer").joinpath(name).read_text(encoding="utf-8")


CSS = _package_text("page.css")
SCRIPT = _package_text("page.js")


def embed_json(data: Any) -> str:
    """JSON for a <script type="application/json"> element: every `<` escaped (as are the line
    separators JavaScript once refused), so no `</script>` or `<!--` in the data can end it."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def render_page(data: Mapping[str, Any]) -> str:
    """The whole page: inline CSS and JS, the data embedded; a policy that allows only those two
    (by hash) and no request of any kind."""
    policy = (
        "default-src 'none'; base-uri 'none'; form-action 'none'; img-src data:; "
        f"style-src '{_sha256(CSS)}'; script-src '{_sha256(SCRIPT)}'"
    )
    bound = " (reads gold evidence: an upper bound)" if data.get("reads_gold") else ""
    if data.get("annotated"):
        bound += " (the answerer saw judge-side annotations: answer.protocol exabase)"
    title = html.escape(f"BEAM memory benchmark: {data.get('mode') or 'unknown'} run{bound}")
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n"
        "<noscript>This page needs JavaScript to show the run.</noscript>\n"
        '<main id="app"></main>\n'
        f'<script type="application/json" id="run-data">{embed_json(data)}</script>\n'
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


def render_run_page(inputs: PageInputs) -> str:
    """The run's page from what it shows: the one entry of the viewer (the viewer and the
    report stages write what it returns)."""
    return render_page(page_data(inputs))
