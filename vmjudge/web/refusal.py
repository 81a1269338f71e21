"""How a refused request is answered: one sentence, as a small page of its own or, under /api/,
as {"error": sentence}, with its status.

Kept apart from app.py so that every part that refuses (the middlewares, the error handlers)
answers alike without importing the app. The page uses no session and no template: it must
work whatever failed, the queue and the templates included.
"""

from __future__ import annotations

import html

from starlette.responses import HTMLResponse, JSONResponse, Response

TITLES = {400: "Bad request", 401: "Sign in", 403: "Refused", 404: "Not found", 405: "Method not allowed",
          408: "Too slow", 409: "Not accepted", 413: "Too large", 429: "Too many", 500: "Server error",
          503: "Unavailable"}


def refusal(path: str, status: int, sentence: str, headers: dict[str, str] | None = None) -> Response:
    """The answer to a refused request: JSON under /api/, else a small page."""
    if path.startswith("/api/"):
        return JSONResponse({"error": sentence}, status_code=status, headers=headers)
    title = TITLES.get(status, "Refused")
    signin = "<p><a href='/signin'>Sign in</a></p>" if status == 401 else "<p><a href='/'>Back to the portal</a></p>"
    page = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>"
            f"{status} {html.escape(title)}</title><link rel='stylesheet' href='/static/portal.css'></head><body>"
            f"<main><h1>{status} {html.escape(title)}</h1><p class='error'>{html.escape(sentence)}</p>{signin}"
            "</main></body></html>\n")
    return HTMLResponse(page, status_code=status, headers=headers)
