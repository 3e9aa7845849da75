"""``python -m fbrapids ...``: the ``fbrapids`` console script (:func:`fbrapids.app.cli.main`),
for an environment whose ``bin/`` is not on ``PATH``."""

from __future__ import annotations

from fbrapids.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
