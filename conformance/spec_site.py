"""Renders spec/site/index.html: the requirements catalogue and the OpenAPI reference on one page.

Reviewers read the spec as the design's source of truth; this page puts the rules, the checks
that verify each rule and the operations they govern side by side, with links both ways. It is
generated from the same data as REQUIREMENTS.md (`session-lineage docs`) and kept fresh by a test.
The page needs no network; Mermaid diagrams are drawn when the browser can load Mermaid, and
shown as their source otherwise.
"""

from __future__ import annotations

import html
import json
from typing import Any

from markdown_it import MarkdownIt

import spec
from conformance.docs import render_requirements
from conformance.registry import all_checks

SITE_HTML = spec.SPEC_DIR / "site" / "index.html"
METHODS = ("get", "post", "put", "patch", "delete")

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1d2329;background:#fff}
nav{position:fixed;top:0;bottom:0;left:0;width:250px;overflow:auto;padding:1em;background:#f4f6f8;border-right:1px solid #dde2e6;font-size:13px}
nav a{display:block;color:#1d4f91;text-decoration:none;padding:1px 0}
main{margin-left:290px;max-width:980px;padding:1em 2em 4em}
h1,h2,h3{line-height:1.25}h2{border-bottom:1px solid #dde2e6;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin-top:1.6em}
table{border-collapse:collapse;margin:.8em 0;font-size:14px}td,th{border:1px solid #dde2e6;padding:.3em .6em;vertical-align:top}
th{background:#f4f6f8;text-align:left}code{background:#f4f6f8;padding:0 .25em;border-radius:3px;font-size:92%}
pre{background:#f4f6f8;padding:.8em;overflow:auto;border-radius:4px;font-size:13px}
.op{border:1px solid #dde2e6;border-radius:6px;padding:.2em 1em .8em;margin:1em 0}
.method{display:inline-block;min-width:4.5em;font-weight:600;text-transform:uppercase;color:#fff;background:#1d4f91;border-radius:3px;padding:0 .4em;text-align:center}
.method.get{background:#2f7d32}.method.delete{background:#b3261e}.method.patch{background:#8a5a00}
.muted{color:#5b6670}
"""

MERMAID = (
    '<script type="module">try{const m=await import("https://cdn.jsdelivr.net/npm/mermaid@11/dist/mermaid.esm.min.mjs");'
    "m.default.initialize({startOnLoad:false});await m.default.run({querySelector:'pre.mermaid'});}catch(e){}</script>"
)


def render_site() -> str:
    """The whole page; deterministic, so a test can compare it with the committed file."""
    markdown = MarkdownIt("commonmark", {"html": True}).enable("table")
    markdown.add_render_rule("fence", _fence)
    catalogue = markdown.render(_link_requirement_headings(render_requirements()))
    document = spec.openapi()
    body = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        f"<title>Session Lineage {html.escape(spec.spec_version())}</title>",
        f"<style>{STYLE}</style></head><body>",
        _navigation(document),
        "<main>",
        catalogue,
        '<h1 id="api">API reference</h1>',
        f"<p class='muted'>From <code>openapi.yaml</code> (OpenAPI {html.escape(document['openapi'])}); "
        "each operation lists the requirements that govern it. Code generators should read "
        "<code>openapi.bundled.yaml</code>.</p>",
        *_operations(document),
        '<h1 id="checks">Checks</h1>',
        "<p class='muted'>Every check of the conformance suite and the requirements it verifies.</p>",
        *_checks(),
        "</main>",
        MERMAID,
        "</body></html>",
    ]
    return "\n".join(body) + "\n"


def _fence(renderer: Any, tokens: Any, index: int, options: Any, env: Any) -> str:
    token = tokens[index]
    if token.info.strip() == "mermaid":
        return f'<pre class="mermaid">{html.escape(token.content)}</pre>\n'
    return f"<pre><code>{html.escape(token.content)}</code></pre>\n"


def _link_requirement_headings(text: str) -> str:
    """Give every requirement heading a stable anchor (`#REQ-ID`) the API reference links to."""
    lines = []
    for line in text.splitlines():
        if line.startswith("### ") and ":" in line:
            req_id = line[4:].split(":", 1)[0]
            lines.append(f'<a id="{html.escape(req_id)}"></a>')
            lines.append("")
        if line.startswith("Checked by: `"):
            names = [name.strip().strip("`") for name in line[len("Checked by: "):].split(",")]
            line = "Checked by: " + ", ".join(f"[`{name}`](#check-{name})" for name in names)
        lines.append(line)
    return "\n".join(lines)


def _requirements_by_operation() -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    all_ops = [
        op["operationId"]
        for item in spec.openapi()["paths"].values()
        for method, op in item.items()
        if method in METHODS
    ]
    for req in spec.requirements():
        operations = req.get("operations", [])
        for operation_id in all_ops if operations == "all" else operations:
            found.setdefault(operation_id, []).append(req)
    return found


def _navigation(document: dict[str, Any]) -> str:
    catalogue = spec.load_yaml(spec.REQUIREMENTS_PATH)
    links = ["<nav><strong>Requirements</strong>"]
    for chapter in catalogue["chapters"]:
        anchor = "".join(ch for ch in chapter["title"].lower().replace(" ", "-") if ch.isalnum() or ch == "-")
        links.append(f'<a href="#{anchor}">{html.escape(chapter["title"])}</a>')
    links.append('<br><strong><a href="#api">API reference</a></strong>')
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                links.append(f'<a href="#op-{operation["operationId"]}">{method.upper()} {html.escape(path)}</a>')
    links.append('<br><strong><a href="#checks">Checks</a></strong></nav>')
    return "\n".join(links)


def _operations(document: dict[str, Any]) -> list[str]:
    governing = _requirements_by_operation()
    out: list[str] = []
    for path, item in document["paths"].items():
        shared = item.get("parameters", [])
        for method, operation in item.items():
            if method not in METHODS:
                continue
            op_id = operation["operationId"]
            out.append(f'<div class="op" id="op-{op_id}">')
            out.append(
                f'<h3><span class="method {method}">{method}</span> <code>{html.escape(path)}</code> '
                f"<span class='muted'>{html.escape(op_id)}</span></h3>"
            )
            out.append(f"<p>{html.escape(' '.join(str(operation.get('summary', '')).split()))}</p>")
            parameters = [_resolve(document, p) for p in [*shared, *operation.get("parameters", [])]]
            if parameters:
                out.append("<table><tr><th>parameter</th><th>in</th><th>required</th><th>description</th></tr>")
                for parameter in parameters:
                    out.append(
                        f"<tr><td><code>{html.escape(parameter['name'])}</code></td><td>{parameter['in']}</td>"
                        f"<td>{'yes' if parameter.get('required') else 'no'}</td>"
                        f"<td>{html.escape(' '.join(str(parameter.get('description', '')).split()))}</td></tr>"
                    )
                out.append("</table>")
            request = operation.get("requestBody", {}).get("content", {})
            for media_type, content in request.items():
                out.append(f"<p>Request body <code>{html.escape(media_type)}</code>: {_schema_name(content.get('schema', {}))}</p>")
            out.append("<table><tr><th>status</th><th>answer</th><th>body</th></tr>")
            for status, response in operation.get("responses", {}).items():
                response = _resolve(document, response)
                bodies = ", ".join(
                    f"<code>{html.escape(media)}</code> {_schema_name(c.get('schema', {}))}"
                    for media, c in response.get("content", {}).items()
                )
                description = " ".join(str(response.get("description", "")).split())
                out.append(f"<tr><td>{html.escape(str(status))}</td><td>{html.escape(description)}</td><td>{bodies}</td></tr>")
            out.append("</table>")
            rules = governing.get(op_id, [])
            if rules:
                links = ", ".join(f'<a href="#{r["id"]}">{html.escape(r["id"])}</a>' for r in rules)
                out.append(f"<p>Requirements: {links}</p>")
            out.append("</div>")
    return out


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    ref = item.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return item
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return f"<code>{html.escape(ref)}</code>"
    return f"<code>{html.escape(json.dumps(schema, sort_keys=True))}</code>"


def _checks() -> list[str]:
    out = ["<table><tr><th>check</th><th>what it shows</th><th>requirements</th></tr>"]
    for item in all_checks():
        links = ", ".join(f'<a href="#{req}">{html.escape(req)}</a>' for req in item.requirements)
        out.append(
            f'<tr id="check-{html.escape(item.name)}"><td><code>{html.escape(item.name)}</code></td>'
            f"<td>{html.escape(item.title)}</td><td>{links}</td></tr>"
        )
    out.append("</table>")
    return out
