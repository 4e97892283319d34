"""``python -m skyrl_gym.cli``: the same as ``skyrl-gym``."""

import sys

from skyrl_gym.cli import main

if __name__ == "__main__":
    sys.exit(main())
