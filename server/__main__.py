"""`python -m server`: the same entry point as the `responses-server` script."""

from server.cli import main

if __name__ == "__main__":
    main()
