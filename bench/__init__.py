"""relay's benchmarks: ``python -m bench [NAME ...] [--quick]`` (see ``bench/README.md``)."""
