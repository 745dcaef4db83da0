"""Training, from the command line or from Python:

    python -m rlcore.train algo=sac env=Hopper          # rlcore.cli: overrides, errors, exit codes
    from rlcore.train import train; train(cfg, run_dir)  # rlcore.run: one run, from a composed config
"""

from rlcore.cli import cli
from rlcore.run import train

__all__ = ["cli", "train"]

if __name__ == "__main__":
    cli()
