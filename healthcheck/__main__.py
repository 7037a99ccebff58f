"""``python -m healthcheck`` entry point."""

from healthcheck.cli import entry

if __name__ == "__main__":
    entry()
