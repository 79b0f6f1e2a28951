"""``python -m im2rec``: the same as the ``im2rec`` command."""

from .cli import main

if __name__ == "__main__":
    main()
