"""``python -m rlcore``: the list of rlcore's commands (``rlcore.commands``)."""

from rlcore.commands import main

raise SystemExit(main())
