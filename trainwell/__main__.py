"""``python -m trainwell`` is the ``trainwell`` command (also what torchrun can launch)."""

from trainwell.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
