"""`python -m cdf_platform.cli`: `cdf-platform` without its console script."""

from cdf_platform.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
