"""`python -m kgen`: the same as the `kgen` command."""
from .cli import main

if __name__ == "__main__":  # spawned build workers import this module as __mp_main__
    main()
