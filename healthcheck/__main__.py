"""``python -m healthcheck`` entry point."""

from healthcheck.cli.main import entry

if __name__ == "__main__":
    entry()
