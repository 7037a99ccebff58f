"""``python -m healthcheck`` entry point."""

from healthcheck.cli import main

if __name__ == "__main__":
    main()
