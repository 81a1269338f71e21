"""The participants' portal, `vmjudge web`: sign in with a token, upload an entry, follow it,
read its report, see the boards; organisers see every entry, its attempts and its logs.

One Starlette app built by app.create_app(site) (no module-level state): portal.py (the home,
who is signed in, CSRF, templates), pages.py (the participant's pages), organiser.py,
api.py (the JSON API, bearer tokens only), upload.py (an upload streamed to disk, capped, then
admitted by queue/admit.py as `vmjudge submit` admits), entries.py (paged lists), security.py
(headers, body caps) and secret.py (the session-signing key kept in the home). Participants
see only what reports.report.show() gives them. Layers: cli imports web, nothing below does.
"""
