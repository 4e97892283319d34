"""Alias kept for code written against SkyRL-gym, which names this module ``skyrl_gym.error``."""

from skyrl_gym.errors import *  # noqa: F401,F403
from skyrl_gym.errors import Error, RegistrationError  # noqa: F401
