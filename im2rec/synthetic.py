"""``python -m im2rec.synthetic``, as the README says: the corpus generator, which lives in ``im2rec.testing.synthetic``."""

from .testing.synthetic import main

if __name__ == "__main__":
    main()
