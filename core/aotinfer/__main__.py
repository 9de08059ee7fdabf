"""``python -m aotinfer ...`` runs the aotinfer command line."""

from .cli import main

raise SystemExit(main())
