"""``GET /docs``: the API reference, rendered on the server from the OpenAPI document.

One HTML page, no JavaScript and nothing fetched from elsewhere (it works offline and under a
strict Content-Security-Policy): every operation with its parameters, request body and
responses, the webhooks relay sends, and every schema, each linked by anchor. It is built
from ``relay.api.openapi.document()``, so it can never disagree with ``/openapi.json``.
"""

from __future__ import annotations

import json
from functools import cache
from html import escape
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from relay.api.openapi import document

METHODS = ("get", "put", "post", "delete", "patch")
_REF_PREFIX = "#/components/schemas/"
_STYLE = """
body{font:15px/1.5 system-ui,sans-serif;max-width:72rem;margin:0 auto;padding:1rem 2rem;
color:#1b1f24}
h2{border-bottom:1px solid #d0d7de;padding-bottom:.3rem;margin-top:2.5rem}
section.op{border:1px solid #d0d7de;border-radius:6px;padding:.2rem 1rem 1rem;margin:1rem 0}
.method{font-weight:700;text-transform:uppercase;padding:.1rem .4rem;border-radius:4px;
background:#ddf4ff}
code,pre{font:13px/1.4 ui-monospace,monospace}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;border-radius:4px}
table{border-collapse:collapse;margin:.4rem 0}
td,th{border:1px solid #d0d7de;padding:.2rem .5rem;text-align:left;vertical-align:top}
nav ul{columns:2}
"""
# The page has no script and loads nothing: say so to the browser.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def anchor(method: str, path: str) -> str:
    return "op-" + method + "-" + "".join(c if c.isalnum() else "-" for c in path).strip("-")


def _schema_link(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        name = escape(ref[len(_REF_PREFIX) :])
        return f'<a href="#schema-{name}"><code>{name}</code></a>'
    return f"<pre>{escape(json.dumps(schema, indent=2))}</pre>"


def _parameters(params: list[dict[str, Any]]) -> str:
    if not params:
        return ""
    rows = "".join(
        "<tr>"
        f"<td><code>{escape(p['name'])}</code></td><td>{escape(p['in'])}</td>"
        f"<td>{'yes' if p.get('required') else 'no'}</td>"
        f"<td><code>{escape(json.dumps(p.get('schema', {})))}</code></td>"
        f"<td>{escape(p.get('description', ''))}</td>"
        "</tr>"
        for p in params
    )
    return (
        "<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>required</th>"
        f"<th>schema</th><th>description</th></tr>{rows}</table>"
    )


def _body(body: dict[str, Any] | None) -> str:
    if not body:
        return ""
    parts = [f"<h4>Request body{' (required)' if body.get('required') else ''}</h4>"]
    for media_type, content in body.get("content", {}).items():
        parts.append(f"<p><code>{escape(media_type)}</code>: ")
        parts.append(_schema_link(content.get("schema", {})) + "</p>")
    return "".join(parts)


def _responses(responses: dict[str, Any]) -> str:
    rows = []
    for code, answer in responses.items():
        content = answer.get("content", {})
        body = "; ".join(
            f"<code>{escape(media)}</code> {_schema_link(c.get('schema', {}))}"
            for media, c in content.items()
        )
        headers = ", ".join(f"<code>{escape(h)}</code>" for h in answer.get("headers", {}))
        rows.append(
            f"<tr><td><code>{escape(code)}</code></td>"
            f"<td>{escape(answer.get('description', ''))}</td><td>{body}</td>"
            f"<td>{headers}</td></tr>"
        )
    return (
        "<h4>Responses</h4><table><tr><th>status</th><th>description</th><th>body</th>"
        f"<th>headers</th></tr>{''.join(rows)}</table>"
    )


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    auth = "no API key" if op.get("security") == [] else "API key (Bearer)"
    description = op.get("description")
    return (
        f'<section class="op" id="{anchor(method, path)}">'
        f'<h3><span class="method">{escape(method)}</span> <code>{escape(path)}</code></h3>'
        f"<p>{escape(op.get('summary', ''))}</p>"
        + (f"<p>{escape(description)}</p>" if description else "")
        + f"<p>Operation <code>{escape(op.get('operationId', ''))}</code>; {auth}.</p>"
        + _parameters(op.get("parameters", []))
        + _body(op.get("requestBody"))
        + _responses(op.get("responses", {}))
        + "</section>"
    )


def _operations(items: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, item in items.items()
        for method, op in item.items()
        if method in METHODS
    ]


@cache
def render() -> str:
    """The reference page (built once per process)."""
    doc = document()
    info = doc["info"]
    operations = _operations(doc["paths"])
    webhooks = _operations(doc.get("webhooks", {}))
    schemes = doc["components"]["securitySchemes"]
    toc = "".join(
        f'<li><a href="#{anchor(m, p)}"><span class="method">{escape(m)}</span> '
        f"<code>{escape(p)}</code></a></li>"
        for m, p, _ in operations
    )
    hooks_toc = "".join(
        f'<li><a href="#{anchor(m, p)}"><code>{escape(p)}</code></a></li>' for m, p, _ in webhooks
    )
    schemas = "".join(
        f'<section id="schema-{escape(name)}"><h3><code>{escape(name)}</code></h3>'
        f"<pre>{escape(json.dumps(schema, indent=2))}</pre></section>"
        for name, schema in doc["components"]["schemas"].items()
    )
    auth = "".join(
        f"<p><code>{escape(name)}</code>: {escape(s.get('description', ''))}</p>"
        for name, s in schemes.items()
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(info['title'])} {escape(info['version'])} API reference</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>{escape(info['title'])} API reference <small>{escape(info['version'])}</small></h1>"
        f"<p>{escape(info.get('description', ''))}</p>"
        '<p>The same as the OpenAPI 3.1 document at <a href="/openapi.json">'
        "<code>/openapi.json</code></a>, rendered.</p>"
        f"<h2>Authentication</h2>{auth}"
        f"<h2>Operations</h2><nav><ul>{toc}</ul></nav>"
        + "".join(_operation(m, p, op) for m, p, op in operations)
        + "<h2>Webhooks</h2><p>What relay POSTs to your receivers (OpenAPI "
        f"<code>webhooks</code>).</p><nav><ul>{hooks_toc}</ul></nav>"
        + "".join(_operation(m, p, op) for m, p, op in webhooks)
        + f"<h2>Schemas</h2>{schemas}</body></html>"
    )


async def reference(request: Request) -> Response:
    """``GET /docs``: the rendered reference (no API key needed, like ``/openapi.json``)."""
    return HTMLResponse(render(), headers={"Content-Security-Policy": CSP})
