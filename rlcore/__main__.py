"""``python -m rlcore``: the list of rlcore's commands (``rlcore.commands``)."""

from rlcore.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
