"""The daemon's read-only web page: the queue, each running sweep's progress, ETA, best so
far and each host's step, and the ended sweeps' answers with links to their reports.

The page is plain HTML, CSS and JavaScript (``static/``: no build step, nothing fetched from
elsewhere) that polls ``GET /dashboard/state`` every few seconds; :mod:`.board` makes that
document, with its words made once on the daemon from the same snapshot ``status`` shows. The
API serves both (``orchestrator.api``); this ``__init__`` imports nothing, so the API names the
files without loading the rest.
"""

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
"""The page's files: ``index.html``, ``dashboard.js``, ``dashboard.css``."""
