"""``python -m rlcore.benchmarks.throughput``: the suite's command line (``cli.main``)."""

from rlcore.benchmarks.throughput.cli import main

if __name__ == "__main__":
    main()
